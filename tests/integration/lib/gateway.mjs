// Starts the real fleetgate binary for a test, plus the small HTTP helpers the tests share.
//
// startGateway(config) writes the YAML to a fresh temp dir, starts `fleetgate --config FILE`,
// parses its JSON log lines (stderr) and resolves once both listeners announced their address.
// Every gateway started here is also killed by PID when the test process exits, as a backstop to
// the tests' own after() hooks.

import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

import { SANITIZER_EXIT_CODE, sanitizerReports, trackProcess } from './sanitize.mjs';

export const REPO_ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..', '..');
export const FLEETGATE_BIN = process.env.FLEETGATE_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate');

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

export function makeTempDir(prefix = 'fleetgate-it-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function removeDir(dir) {
  if (dir) {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// Minimal YAML writer: maps, lists and scalars; strings are double-quoted (JSON escapes are valid
// YAML escapes), so durations like "200ms" and URLs stay strings.
export function toYaml(value, indent = 0) {
  const pad = ' '.repeat(indent);
  const scalar = (v) => {
    if (typeof v === 'string') {
      return JSON.stringify(v);
    }
    if (typeof v === 'number' || typeof v === 'boolean') {
      return String(v);
    }
    if (v === null || v === undefined) {
      return '""';
    }
    throw new Error(`toYaml: unsupported ${typeof v}`);
  };
  const isComposite = (v) => v !== null && typeof v === 'object';
  if (Array.isArray(value)) {
    if (value.length === 0) {
      return `${pad}[]\n`;
    }
    let out = '';
    for (const item of value) {
      if (isComposite(item) && !Array.isArray(item)) {
        const inner = toYaml(item, indent + 2);
        out += `${pad}- ${inner.slice(indent + 2)}`;
      } else if (Array.isArray(item)) {
        out += `${pad}-\n${toYaml(item, indent + 2)}`;
      } else {
        out += `${pad}- ${scalar(item)}\n`;
      }
    }
    return out;
  }
  if (isComposite(value)) {
    let out = '';
    for (const [key, v] of Object.entries(value)) {
      if (v === undefined) {
        continue;
      }
      if (isComposite(v)) {
        if (Array.isArray(v) && v.length === 0) {
          out += `${pad}${key}: []\n`;
        } else {
          out += `${pad}${key}:\n${toYaml(v, indent + 2)}`;
        }
      } else {
        out += `${pad}${key}: ${scalar(v)}\n`;
      }
    }
    return out;
  }
  return `${pad}${scalar(value)}\n`;
}

function withDefaults(config) {
  const c = structuredClone(config);
  // A short drain keeps a failed test from waiting 30 s (the default) for held requests at stop().
  c.server = { listen: '127.0.0.1:0', drain_timeout: '3s', ...(c.server ?? {}) };
  c.admin = { listen: '127.0.0.1:0', ...(c.admin ?? {}) };
  c.log = { level: 'info', ...(c.log ?? {}) };
  return c;
}

export class Gateway extends EventEmitter {
  constructor(child, dir, configPath) {
    super();
    this.child = child;
    this.pid = child.pid;
    this.dir = dir;
    this.configPath = configPath;
    this.logs = [];
    this.stderrText = '';
    this.exitCode = undefined;
    this.signal = undefined;
    this.publicUrl = null;
    this.adminUrl = null;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        live.delete(child.pid);
        this.exitCode = code;
        this.signal = signal;
        this.emit('exit', code, signal);
        resolve(code);
      });
    });
    let pending = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (text) => {
      this.stderrText += text;
      pending += text;
      let nl;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        if (!line.trim()) {
          continue;
        }
        let entry;
        try {
          entry = JSON.parse(line);
        } catch {
          entry = { msg: '(not json)', text: line };
        }
        this.logs.push(entry);
        this.emit('log', entry);
      }
    });
    child.stdout.resume();
  }

  get running() {
    return this.exitCode === undefined && this.signal === undefined;
  }

  // Request log lines ({"msg":"request",...}).
  requestLogs() {
    return this.logs.filter((l) => l.msg === 'request');
  }

  // Resolves with the first log line (already seen or future) matching predicate.
  // Waits for both "listening" log lines and sets publicUrl / adminUrl from them.
  async waitForListeners({ timeoutMs = 10000, publicScheme = 'http' } = {}) {
    const [pub, adm] = await Promise.all([
      this.waitForLog((l) => l.msg === 'listening' && l.listener === 'public', { timeoutMs, what: 'the public listening line' }),
      this.waitForLog((l) => l.msg === 'listening' && l.listener === 'admin', { timeoutMs, what: 'the admin listening line' }),
    ]);
    this.publicUrl = `${publicScheme}://${pub.address}`;
    this.adminUrl = `http://${adm.address}`;
  }

  waitForLog(predicate, { timeoutMs = 5000, what = 'a log line' } = {}) {
    const found = this.logs.find(predicate);
    if (found) {
      return Promise.resolve(found);
    }
    return new Promise((resolve, reject) => {
      const onLog = (entry) => {
        if (predicate(entry)) {
          cleanup();
          resolve(entry);
        }
      };
      const onExit = (code, signal) => {
        cleanup();
        reject(new Error(`gateway exited (code ${code}, signal ${signal}) while waiting for ${what}\n${this.stderrText}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; logs:\n${this.stderrText.slice(-4000)}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.off('log', onLog);
        this.off('exit', onExit);
      };
      this.on('log', onLog);
      this.on('exit', onExit);
    });
  }

  // The request log line for a request id (the gateway writes it when the request is finished).
  requestLog(requestId, options = {}) {
    return this.waitForLog((l) => l.msg === 'request' && l.request_id === requestId, {
      what: `the request log line of ${requestId}`,
      ...options,
    });
  }

  // SIGTERM by PID, wait for the exit, return the exit code (null if killed by a signal).
  async stop({ timeoutMs = 15000 } = {}) {
    if (this.running) {
      try {
        process.kill(this.pid, 'SIGTERM');
      } catch {
        // already gone
      }
      const timer = setTimeout(() => this.kill(), timeoutMs);
      await this.exited;
      clearTimeout(timer);
    }
    removeDir(this.dir);
    this.dir = null;
    return this.exitCode;
  }

  async kill() {
    if (this.running) {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      await this.exited;
    }
    removeDir(this.dir);
    this.dir = null;
  }

  async metrics() {
    const res = await request(`${this.adminUrl}/metrics`);
    return res.text;
  }

  // Value of one Prometheus sample, e.g. metric('fleetgate_queue_depth', {model: 'm'}).
  async metric(name, labels = {}) {
    return metricValue(await this.metrics(), name, labels);
  }

  // Polls /metrics until predicate(value) holds for the sample.
  async waitForMetric(name, labels, predicate, { timeoutMs = 5000 } = {}) {
    const deadline = Date.now() + timeoutMs;
    let value;
    for (;;) {
      value = await this.metric(name, labels);
      if (predicate(value)) {
        return value;
      }
      if (Date.now() > deadline) {
        throw new Error(`timed out waiting for ${name}${JSON.stringify(labels)}; last value ${value}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  waitForQueueDepth(model, depth, options) {
    return this.waitForMetric('fleetgate_queue_depth', { model }, (v) => v === depth, options);
  }
}

// Stops a gateway (SIGTERM) in an after() hook and fails the hook when the gateway had died during
// the tests or did not exit 0 (a crash at shutdown is a bug too).
export async function stopChecked(gw) {
  if (!gw) {
    return;
  }
  const wasRunning = gw.running;
  const code = await gw.stop();
  const reports = sanitizerReports().filter((r) => r.pid === gw.pid);
  if (reports.length > 0 || code === SANITIZER_EXIT_CODE) {
    throw new Error(`a sanitizer stopped the gateway (exit code ${code})\n${reports.map((r) => r.text).join('\n')}`);
  }
  if (!wasRunning) {
    throw new Error(`the gateway died during the tests (exit code ${gw.exitCode}, signal ${gw.signal})\n${gw.stderrText.slice(-3000)}`);
  }
  if (code !== 0) {
    throw new Error(`the gateway exited with code ${code} (signal ${gw.signal}) on SIGTERM\n${gw.stderrText.slice(-3000)}`);
  }
}

export function metricValue(text, name, labels = {}) {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) {
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) {
      continue;
    }
    const got = {};
    for (const part of (m[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      got[part[1]] = part[2];
    }
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) {
      return Number(m[4]);
    }
  }
  return undefined;
}

// Starts fleetgate with the given config (an object turned into YAML, or a YAML string).
// Options: env (added to process.env), files ({name: content} written next to the config),
// args (extra command-line arguments), timeoutMs (for both listening lines; default 10 s),
// prefix (a command that execs the gateway, keeping its PID: e.g. unshare for a private
// /etc/hosts).
export async function startGateway(config, { env = {}, args = [], timeoutMs = 10000, prefix = [] } = {}) {
  if (!fs.existsSync(FLEETGATE_BIN)) {
    throw new Error(`fleetgate binary not found at ${FLEETGATE_BIN}: build it (ninja -C build fleetgate) or set FLEETGATE_BIN`);
  }
  const dir = makeTempDir('fleetgate-gw-');
  const configPath = path.join(dir, 'fleetgate.yaml');
  fs.writeFileSync(configPath, typeof config === 'string' ? config : toYaml(withDefaults(config)));
  const argv = [...prefix, FLEETGATE_BIN, '--config', configPath, ...args];
  const child = spawn(argv[0], argv.slice(1), {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.set(child.pid, child);
  trackProcess(child, `fleetgate --config ${configPath}`);
  const gw = new Gateway(child, dir, configPath);
  const tlsPublic = typeof config === 'object' && config.server?.tls?.cert;
  try {
    await gw.waitForListeners({ timeoutMs, publicScheme: tlsPublic ? 'https' : 'http' });
  } catch (e) {
    await gw.kill();
    throw e;
  }
  return gw;
}

// Runs `fleetgate ...args` to completion (for --check); returns {status, stdout, stderr}.
export function runFleetgate(args, { timeoutMs = 10000 } = {}) {
  const r = spawnSync(FLEETGATE_BIN, args, { encoding: 'utf8', timeout: timeoutMs });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, error: r.error };
}

// A test CA and a leaf certificate for 127.0.0.1 (subjectAltName IP:127.0.0.1), made with the
// openssl CLI. Returns paths and PEM contents; `other*` is a second, unrelated CA (for "wrong CA");
// `wrongHost*` is a leaf from the same CA for another host name (for hostname verification).
export function makeTestCerts(dir) {
  const run = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const p = (name) => path.join(dir, name);
  const makeCa = (name, cn) => {
    run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', p(`${name}.key`), '-out', p(`${name}.pem`), '-days', '2', '-subj', `/CN=${cn}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  };
  makeCa('ca', 'Fleetgate Test CA');
  makeCa('other-ca', 'Unrelated Test CA');
  fs.writeFileSync(p('leaf.ext'),
    'subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n');
  run('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', p('server.key'), '-out', p('server.csr'), '-subj', '/CN=127.0.0.1');
  run('x509', '-req', '-in', p('server.csr'), '-CA', p('ca.pem'), '-CAkey', p('ca.key'),
    '-set_serial', '4242', '-out', p('server.pem'), '-days', '2', '-extfile', p('leaf.ext'));
  // Signed by the same CA but for another name: must fail hostname verification on 127.0.0.1.
  fs.writeFileSync(p('wrong.ext'),
    'subjectAltName=DNS:not-this-host.example\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n');
  run('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', p('wrong.key'), '-out', p('wrong.csr'), '-subj', '/CN=not-this-host.example');
  run('x509', '-req', '-in', p('wrong.csr'), '-CA', p('ca.pem'), '-CAkey', p('ca.key'),
    '-set_serial', '4243', '-out', p('wrong.pem'), '-days', '2', '-extfile', p('wrong.ext'));
  const read = (name) => fs.readFileSync(p(name), 'utf8');
  return {
    dir,
    caFile: p('ca.pem'),
    ca: read('ca.pem'),
    otherCaFile: p('other-ca.pem'),
    otherCa: read('other-ca.pem'),
    certFile: p('server.pem'),
    cert: read('server.pem'),
    keyFile: p('server.key'),
    key: read('server.key'),
    wrongHostCert: read('wrong.pem'),
    wrongHostKey: read('wrong.key'),
  };
}

// One HTTP(S) request; resolves with {status, headers, body (Buffer), text, json (or null), requestId}.
// A fresh connection per request unless an agent is given. options.ca for https.
export function request(url, { method = 'GET', headers = {}, body, ca, agent = false, timeoutMs = 15000, signal } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const mod = u.protocol === 'https:' ? https : http;
    const payload = body === undefined ? undefined : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    const h = { ...headers };
    if (payload !== undefined && !Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) {
      h['Content-Type'] = 'application/json';
    }
    if (payload !== undefined) {
      h['Content-Length'] = Buffer.byteLength(payload);
    }
    const req = mod.request(u, { method, headers: h, agent, ca, signal }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        const text = buf.toString('utf8');
        let json = null;
        try {
          json = JSON.parse(text);
        } catch {
          json = null;
        }
        resolve({ status: res.statusCode, headers: res.headers, body: buf, text, json, requestId: res.headers['x-request-id'] });
      });
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`request to ${url} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

export function postJson(baseUrl, path, body, options = {}) {
  return request(`${baseUrl}${path}`, { method: 'POST', body, ...options });
}

// A streaming request that exposes its progress: resolves on the response head with
// {status, headers, pieces: [{text, at}], text(), done (promise of the full text), destroy()}.
// onData(piece, stream) is called for every piece received.
export function openStream(url, { body, headers = {}, ca, onData, timeoutMs = 15000 } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const mod = u.protocol === 'https:' ? https : http;
    const payload = typeof body === 'string' ? body : JSON.stringify(body);
    const req = mod.request(u, {
      method: 'POST',
      agent: false,
      ca,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload), ...headers },
    }, (res) => {
      const stream = {
        status: res.statusCode,
        headers: res.headers,
        requestId: res.headers['x-request-id'],
        pieces: [],
        ended: false,
        closed: false,
        text() {
          return this.pieces.map((p) => p.text).join('');
        },
        destroy() {
          req.destroy();
          res.destroy();
        },
      };
      res.setEncoding('utf8');
      stream.done = new Promise((resolveDone, rejectDone) => {
        res.on('data', (text) => {
          stream.pieces.push({ text, at: Date.now() });
          onData?.(text, stream);
        });
        res.on('end', () => {
          stream.ended = true;
          resolveDone(stream.text());
        });
        res.on('close', () => {
          stream.closed = true;
          if (!stream.ended) {
            rejectDone(Object.assign(new Error('stream closed before its end'), { partial: stream.text() }));
          }
        });
        res.on('error', () => {});
      });
      stream.done.catch(() => {});
      resolve(stream);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`stream ${url} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

// SSE events of a text: [{comment} | {data}] in order.
export function parseSse(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    if (!block) {
      continue;
    }
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        events.push({ comment: line.slice(1).trim() });
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
    }
    if (data.length > 0) {
      events.push({ data: data.join('\n') });
    }
  }
  return events;
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Resolves when predicate() holds, polling every `everyMs`.
export async function eventually(predicate, { timeoutMs = 5000, everyMs = 20, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(everyMs);
  }
}

// Asserts the OpenAI error shape {"error":{"message","type","param","code"}}; returns the error.
export function openAiError(res) {
  const e = res.json?.error;
  if (!e || typeof e.message !== 'string' || typeof e.type !== 'string' || !('param' in e) || !('code' in e)) {
    throw new Error(`not an OpenAI error body (status ${res.status}): ${res.text}`);
  }
  return e;
}
