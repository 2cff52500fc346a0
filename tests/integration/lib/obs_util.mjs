// Helpers for the observability tests (observability_*.test.mjs): a real Prometheus server from the
// Debian package on 127.0.0.1 with a temporary data directory, promtool, and the PromQL
// expressions of the Grafana dashboard with Grafana's variables filled in.
//
// Every Prometheus started here is stopped by PID (SIGTERM, then SIGKILL), and killed when the test
// process exits as a backstop.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { freePort } from './agent.mjs';
import { REPO_ROOT, makeTempDir, removeDir, request, sleep } from './gateway.mjs';

export const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN || '/usr/bin/prometheus';
export const PROMTOOL_BIN = process.env.PROMTOOL_BIN || '/usr/bin/promtool';
export const DASHBOARD_FILE = path.join(REPO_ROOT, 'deploy', 'grafana', 'fleetgate.json');
export const PROMETHEUS_DIR = path.join(REPO_ROOT, 'deploy', 'prometheus');

const live = new Map(); // pid -> ChildProcess
process.on('exit', () => {
  for (const pid of live.keys()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

// Why the Prometheus tests cannot run here, or null when they can.
export function prometheusMissing() {
  for (const bin of [PROMETHEUS_BIN, PROMTOOL_BIN]) {
    if (!fs.existsSync(bin)) {
      return `${bin} is missing: install the Debian package "prometheus" (./fleet test installs it)`;
    }
  }
  return null;
}

// Runs promtool to completion: {status, stdout, stderr, output (both)}. `input` goes to stdin.
export function promtool(args, { input, cwd, timeoutMs = 20000 } = {}) {
  const r = spawnSync(PROMTOOL_BIN, args, { input, cwd, encoding: 'utf8', timeout: timeoutMs });
  if (r.error) {
    throw r.error;
  }
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, output: `${r.stdout}${r.stderr}` };
}

// A port on 127.0.0.1 that was free a moment ago, from below the ephemeral range.
export { freePort };

export class Prometheus {
  constructor(child, dir, url) {
    this.child = child;
    this.pid = child.pid;
    this.dir = dir;
    this.url = url;
    this.output = '';
    this.exitCode = undefined;
    this.signal = undefined;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        live.delete(child.pid);
        this.exitCode = code;
        this.signal = signal;
        resolve(code);
      });
    });
    for (const stream of [child.stdout, child.stderr]) {
      stream.setEncoding('utf8');
      stream.on('data', (text) => {
        this.output = (this.output + text).slice(-20000);
      });
    }
  }

  get running() {
    return this.exitCode === undefined && this.signal === undefined;
  }

  // GET /api/v1/<path> with query parameters; resolves with the parsed body
  // ({status: 'success'|'error', data, errorType, error}).
  async api(apiPath, params = {}) {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      for (const one of Array.isArray(v) ? v : [v]) {
        qs.append(k, String(one));
      }
    }
    const res = await request(`${this.url}/api/v1/${apiPath}?${qs}`, { timeoutMs: 10000 });
    if (!res.json) {
      throw new Error(`Prometheus /api/v1/${apiPath} answered ${res.status}: ${res.text.slice(0, 500)}`);
    }
    return res.json;
  }

  // An instant query: {ok, error, resultType, result}.
  async query(expr) {
    const body = await this.api('query', { query: expr });
    if (body.status !== 'success') {
      return { ok: false, error: `${body.errorType}: ${body.error}`, result: [] };
    }
    return { ok: true, error: null, resultType: body.data.resultType, result: body.data.result };
  }

  // The numeric value of a one-series query, or undefined.
  async value(expr) {
    const r = await this.query(expr);
    if (!r.ok || r.result.length === 0) {
      return undefined;
    }
    return Number(r.resultType === 'scalar' ? r.result[1] : r.result[0].value[1]);
  }

  // Resolves when the target of `job` has been scraped successfully at least `scrapes` times.
  async waitForScrapes(job, scrapes, { timeoutMs = 30000 } = {}) {
    const deadline = Date.now() + timeoutMs;
    let last;
    for (;;) {
      last = await this.value(`sum(sum_over_time(up{job="${job}"}[5m]))`);
      if (last !== undefined && last >= scrapes) {
        return last;
      }
      if (!this.running) {
        throw new Error(`Prometheus exited (code ${this.exitCode}) while waiting for scrapes:\n${this.output}`);
      }
      if (Date.now() > deadline) {
        const targets = await this.api('targets').catch((e) => String(e));
        throw new Error(`timed out waiting for ${scrapes} successful scrapes of job ${job} (saw ${last}); targets: ${JSON.stringify(targets).slice(0, 2000)}`);
      }
      await sleep(200);
    }
  }

  async stop({ timeoutMs = 10000 } = {}) {
    if (this.running) {
      try {
        process.kill(this.pid, 'SIGTERM');
      } catch {
        // already gone
      }
      const timer = setTimeout(() => {
        try {
          process.kill(this.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }, timeoutMs);
      await this.exited;
      clearTimeout(timer);
    }
    removeDir(this.dir);
    this.dir = null;
  }
}

// Starts Prometheus on 127.0.0.1 (a free port) with `config` (YAML text) written to a fresh temp
// dir, which also holds the TSDB; `files` ({name: content}) are written next to the config (rule
// files, file_sd lists). Resolves once /-/ready answers 200.
export async function startPrometheus(config, { files = {}, timeoutMs = 20000 } = {}) {
  const dir = makeTempDir('fleetgate-prom-');
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), config);
  for (const [name, content] of Object.entries(files)) {
    fs.writeFileSync(path.join(dir, name), content);
  }
  for (let attempt = 1; ; ++attempt) {
    const port = await freePort();
    const child = spawn(PROMETHEUS_BIN, [
      `--config.file=${path.join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    live.set(child.pid, child);
    const prom = new Prometheus(child, dir, `http://127.0.0.1:${port}`);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (!prom.running) {
        break;
      }
      const res = await request(`${prom.url}/-/ready`, { timeoutMs: 1000 }).catch(() => null);
      if (res?.status === 200) {
        return prom;
      }
      if (Date.now() > deadline) {
        await prom.stop({ timeoutMs: 2000 }).catch(() => {});
        throw new Error(`Prometheus did not become ready within ${timeoutMs} ms:\n${prom.output}`);
      }
      await sleep(100);
    }
    // Exited before it was ready: retry once if another process took the port meanwhile.
    if (attempt < 3 && /address already in use/i.test(prom.output)) {
      continue;
    }
    removeDir(dir);
    throw new Error(`Prometheus exited (code ${prom.exitCode}) before it was ready:\n${prom.output}`);
  }
}

// ---- the Grafana dashboard ----

export function loadDashboard(file = DASHBOARD_FILE) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

// Every panel with the title of its row (`rowTitle`), the nested panels of collapsed rows
// included. An expanded row is followed by its panels in the top-level list (by position); a
// collapsed one keeps them in its own `panels`.
export function allPanels(dashboard) {
  const out = [];
  const top = [...(dashboard.panels ?? [])].sort((a, b) => (a.gridPos?.y ?? 0) - (b.gridPos?.y ?? 0) || (a.gridPos?.x ?? 0) - (b.gridPos?.x ?? 0));
  let rowTitle;
  for (const p of top) {
    if (p.type === 'row') {
      rowTitle = p.title;
      out.push({ ...p, rowTitle });
      for (const nested of p.panels ?? []) {
        out.push({ ...nested, rowTitle });
      }
    } else {
      out.push({ ...p, rowTitle });
    }
  }
  return out;
}

// Every PromQL expression of the dashboard's panels: [{panel, row, refId, expr, where}].
export function dashboardExpressions(dashboard) {
  const out = [];
  for (const p of allPanels(dashboard)) {
    for (const t of p.targets ?? []) {
      if (typeof t.expr === 'string' && t.expr.trim() !== '') {
        out.push({ panel: p.title, row: p.rowTitle, refId: t.refId, expr: t.expr, where: `${p.rowTitle ?? '-'} / ${p.title} / ${t.refId}` });
      }
    }
  }
  return out;
}

// Fills in Grafana's variables: `vars` maps names (without $) to values, for $name, ${name},
// ${name:format} and [[name]]. Throws on a variable it does not know, so a typo in the dashboard
// (or a new Grafana built-in) is reported instead of producing a misleading parse error.
export function fillGrafanaVariables(expr, vars) {
  const pattern = /\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]|\$([A-Za-z0-9_]+)/g;
  return expr.replace(pattern, (whole, a, b, c) => {
    const name = a ?? b ?? c;
    if (!(name in vars)) {
      throw new Error(`unknown Grafana variable ${whole} in: ${expr}`);
    }
    return vars[name];
  });
}

// The metric names an expression refers to (fleetgate_* and up), for messages and grouping.
export function metricNames(expr) {
  return [...new Set(expr.match(/\b(?:fleetgate_[a-z0-9_]+|up)\b(?=\s*[{[)\s])/g) ?? [])];
}

// Rule expressions loaded by a running Prometheus: [{group, name, type, query, health, lastError}].
export async function loadedRules(prom) {
  const body = await prom.api('rules');
  if (body.status !== 'success') {
    throw new Error(`GET /api/v1/rules failed: ${JSON.stringify(body)}`);
  }
  const out = [];
  for (const g of body.data.groups) {
    for (const r of g.rules) {
      out.push({ group: g.name, name: r.name, type: r.type, query: r.query, health: r.health, lastError: r.lastError, state: r.state });
    }
  }
  return out;
}

// Alert names declared in a rule file (`- alert: Name` lines), without a YAML parser.
export function declaredAlerts(text) {
  return [...text.matchAll(/^\s*-\s*alert:\s*["']?([A-Za-z0-9_:]+)["']?\s*$/gm)].map((m) => m[1]);
}
