// The routing benchmark (./fleet bench routing; issue 13): simulated phones that behave like
// llama.cpp servers (slot prompt cache, prefill of the uncached tokens only, llama-server's usage
// and timings; docs/simulator.md), run many times faster than real time, behind
//   - HAProxy: balance leastconn, maxconn 1 per phone, its FIFO queue;
//   - Fleetgate with routing.policy least_loaded;
//   - Fleetgate with routing.policy expected_finish.
// Scenarios (docs/benchmarks.md, "Routing"):
//   fraud     K = 4 instruction prefixes of ~5,000 tokens, each review one of them at random plus a
//             unique ~2,000-token case, 8-token answers; 16 one-slot phones (4B profile), 4 of them
//             4x slower; 64 clients in a closed loop.
//   mixed     8 phones, 4 of them 10x slower; unique 2,000-token prompts, 16-token answers;
//             open-loop Poisson arrivals at 50% of the fleet's capacity.
//   tenants   the fraud fleet flooded by a batch tenant (closed loop, 48 clients) while an
//             interactive tenant sends reviews (Poisson, x-fleetgate-priority: 10); its p95
//             beside its p95 on an idle fleet.
// Times are reported in simulated seconds (wall time x the fast phones' time scale). Figures are
// printed and written, never asserted: the command fails only when the tool is broken.

import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import {
  Proc,
  addressFromLine,
  fmt,
  fmtSpread,
  freePorts,
  log,
  markdownTable,
  median,
  sleep,
  stopAll,
  waitForHttp,
  waitForPort,
  writeFile,
} from './lib.mjs';

export const MODEL = 'reviewer';
export const PROFILE = 'qwen3.5-4b/snapdragon-8-elite';
export const PREFILL_TPS = 7000 / 97; // the profile's figures (common/sim/profiles.cpp)
export const DECODE_TPS = 18;
export const CHARS_PER_TOKEN = 4; // the simulator's tokenizer

// ---------------------------------------------------------------------------------------------
// Deterministic text: prompts are made of words from a seeded generator, so every run (and every
// proxy in a run) sends the same sequence of reviews.

export function rng(seed) {
  let s = BigInt(seed) & 0xffffffffffffffffn;
  return () => {
    s = (s + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
    let z = s;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
    z ^= z >> 31n;
    return Number(z >> 11n) / 2 ** 53;
  };
}

const WORDS = [
  'account', 'amount', 'card', 'merchant', 'device', 'country', 'refund', 'chargeback', 'login',
  'transfer', 'payee', 'limit', 'velocity', 'history', 'address', 'shipping', 'billing', 'email',
  'phone', 'session', 'browser', 'risk', 'review', 'customer', 'order', 'dispute', 'pattern',
];

export function text(chars, random, head) {
  let out = head;
  while (out.length < chars) out += ` ${WORDS[Math.floor(random() * WORDS.length)]}`;
  return out.slice(0, chars);
}

// ---------------------------------------------------------------------------------------------
// Processes

function startAgent(bin, { timeScale, seed, slots = 1, profile = PROFILE }) {
  const proc = new Proc(
    `phone${seed}`,
    bin,
    [
      '--listen', '127.0.0.1:0', '--model', MODEL, '--profile', profile, '--slots', String(slots),
      '--time-scale', String(timeScale), '--seed', String(seed), '--log-level', 'warn',
    ],
    { keepLines: 20 },
  );
  return proc
    .waitForLine((l) => l.includes('"msg":"listening"'), 15000)
    .then((line) => {
      const addr = addressFromLine(line);
      return { proc, addr, url: `http://${addr}`, timeScale };
    });
}

// Phones at the given time scales (the batch bench passes another profile and more slots).
export async function startAgents(bin, scales, { profile = PROFILE, slots = 1 } = {}) {
  const agents = [];
  for (let i = 0; i < scales.length; i += 8) {
    const batch = scales
      .slice(i, i + 8)
      .map((timeScale, k) => startAgent(bin, { timeScale, seed: i + k, profile, slots }));
    agents.push(...(await Promise.all(batch)));
  }
  return agents;
}

// timeScale: the phones run that many times faster than real time, so the gateway's knobs that
// are durations of phone work shrink by as much: hold_min_gain (1 s by default, the least gain
// worth leaving a free phone idle for) would otherwise be worth 100 simulated seconds at 100x,
// more than a cached review takes, and no request would ever wait for the phone holding its
// prefix; reserve_window (600 s by default: how long a higher band's prompt keeps a phone from
// lower bands) would otherwise span 1,000 simulated minutes, the whole run.
function gatewayYaml({ publicPort, adminPort, agents, policy, timeScale = 1 }) {
  const endpoints = agents.map((a) => `      - {url: ${JSON.stringify(a.url)}, slots: 1}`).join('\n');
  return `# written by tests/bench/routing.mjs
server:
  listen: 127.0.0.1:${publicPort}
admin:
  listen: 127.0.0.1:${adminPort}
models:
  - name: ${MODEL}
    slots: 1
    endpoints:
${endpoints}
routing:
${policy ? `  policy: ${policy}\n` : ''}  hold_min_gain: ${Math.max(1, Math.round(1000 / timeScale))}ms
${policy ? `  reserve_window: ${Math.max(1, Math.round(600000 / timeScale))}ms\n` : ''}  queue_max: 100000
  queue_timeout: 3600s
  request_timeout: 3600s
upstream:
  max_idle_per_replica: 64
log:
  level: warn
`;
}

// Whether this gateway build takes routing.policy (the key comes with the routing work of issue
// 13): --check on a configuration that sets it.
function gatewayTakesPolicy(env, dir) {
  const file = path.join(dir, 'policy-check.yaml');
  fs.writeFileSync(
    file,
    gatewayYaml({ publicPort: 1, adminPort: 2, agents: [{ url: 'http://127.0.0.1:9' }], policy: 'expected_finish' }),
  );
  const r = spawnSync(env.BIN.gateway, ['--config', file, '--check'], { encoding: 'utf8' });
  return r.status === 0;
}

async function startGateway(env, dir, agents, policy, timeScale) {
  const [publicPort, adminPort] = await freePorts(2);
  const file = path.join(dir, `fleetgate-${policy ?? 'default'}-${publicPort}.yaml`);
  fs.writeFileSync(file, gatewayYaml({ publicPort, adminPort, agents, policy, timeScale }));
  const proc = new Proc('fleetgate', env.BIN.gateway, ['--config', file]);
  await waitForHttp(`http://127.0.0.1:${adminPort}/healthz`, { proc, timeoutMs: 20000 });
  await waitForPort(publicPort, { proc, timeoutMs: 20000 });
  return { proc, url: `http://127.0.0.1:${publicPort}`, admin: `http://127.0.0.1:${adminPort}` };
}

async function startHaproxy(dir, agents) {
  const [port] = await freePorts(1);
  const file = path.join(dir, `haproxy-${port}.cfg`);
  const servers = agents.map((a, i) => `  server p${i} ${a.addr} maxconn 1`).join('\n');
  fs.writeFileSync(
    file,
    `# written by tests/bench/routing.mjs
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 3600s
  timeout server 3600s
  timeout queue 3600s
  timeout http-keep-alive 3600s
  http-reuse always
frontend fe
  bind 127.0.0.1:${port}
  maxconn 4000
  default_backend be
backend be
  balance leastconn
${servers}
`,
  );
  const proc = new Proc('haproxy', 'haproxy', ['-f', file, '-db']);
  await waitForPort(port, { proc, timeoutMs: 10000 });
  return { proc, url: `http://127.0.0.1:${port}` };
}

// ---------------------------------------------------------------------------------------------
// The load: Node's HTTP client is enough here (tens of requests per second of wall time, each a
// 28 KB review), and it reads every answer's usage for the cached share.

function post(agent, url, body, headers = {}) {
  return new Promise((resolve) => {
    const started = performance.now();
    const req = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers },
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const ended = performance.now();
          let usage = null;
          if (res.statusCode === 200) {
            try {
              usage = JSON.parse(Buffer.concat(chunks).toString('utf8')).usage ?? null;
            } catch {
              usage = null;
            }
          }
          resolve({ status: res.statusCode, started, ended, usage });
        });
        res.on('error', () => resolve({ status: 0, started, ended: performance.now(), usage: null }));
      },
    );
    req.on('error', () => resolve({ status: 0, started, ended: performance.now(), usage: null }));
    req.end(body);
  });
}

function reviewBody(prefixes, random, caseChars, answerTokens) {
  const k = Math.floor(random() * prefixes.length);
  const id = Math.floor(random() * 1e12).toString(36);
  return JSON.stringify({
    model: MODEL,
    max_tokens: answerTokens,
    messages: [
      { role: 'system', content: prefixes[k] },
      { role: 'user', content: text(caseChars, random, `Case ${id}:`) },
    ],
  });
}

// Runs the load until `endAt` (wall ms, performance.now()) and waits for the answers in flight
// (at most graceMs). Returns every request's record.
async function closedLoop({ url, clients, seed, endAt, graceMs, makeBody, headers }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  const records = [];
  const loops = [];
  for (let c = 0; c < clients; c++) {
    const random = rng(seed * 1000 + c);
    loops.push(
      (async () => {
        while (performance.now() < endAt) {
          const r = await post(agent, url, makeBody(random), headers);
          records.push(r);
          if (r.status === 0) await sleep(50);
        }
      })(),
    );
  }
  await Promise.race([Promise.all(loops), sleep(endAt - performance.now() + graceMs)]);
  agent.destroy();
  return records;
}

// Poisson arrivals at `rate` per wall second from now until endAt; waits for all answers (at most
// graceMs after endAt).
async function openLoop({ url, rate, seed, endAt, graceMs, makeBody, headers }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4096 });
  const random = rng(seed);
  const records = [];
  const pending = [];
  let next = performance.now();
  while (next < endAt) {
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
    const body = makeBody(random);
    pending.push(post(agent, url, body, headers).then((r) => records.push(r)));
    next += (-Math.log(1 - random()) / rate) * 1000;
  }
  await Promise.race([Promise.all(pending), sleep(endAt - performance.now() + graceMs)]);
  agent.destroy();
  return records;
}

// Figures of the records that ended inside [from, to] (closed loop) or started inside it (open
// loop), in simulated seconds (x timeScale).
function figures(records, { from, to, timeScale, byStart = false }) {
  const inWindow = records.filter((r) => (byStart ? r.started >= from && r.started < to : r.ended >= from && r.ended <= to));
  const ok = inWindow.filter((r) => r.status === 200);
  const lat = ok.map((r) => ((r.ended - r.started) / 1000) * timeScale).sort((a, b) => a - b);
  const pick = (q) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(q * lat.length))] : NaN);
  const mean = lat.length ? lat.reduce((s, x) => s + x, 0) / lat.length : NaN;
  let prompt = 0;
  let cached = 0;
  for (const r of ok) {
    prompt += r.usage?.prompt_tokens ?? 0;
    cached += r.usage?.prompt_tokens_details?.cached_tokens ?? 0;
  }
  const simHours = ((to - from) / 1000) * (timeScale / 3600);
  return {
    count: ok.length,
    failed: inWindow.length - ok.length,
    per_hour: ok.length / simHours,
    mean_s: mean,
    p50_s: pick(0.5),
    p95_s: pick(0.95),
    max_s: lat.length ? lat.at(-1) : NaN,
    cached_share: prompt > 0 ? cached / prompt : NaN,
    latencies: lat,
  };
}

// ---------------------------------------------------------------------------------------------
// Charts (gnuplot, SVG). Skipped with a note when gnuplot is missing.

function hasGnuplot() {
  try {
    execFileSync('sh', ['-c', 'command -v gnuplot'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function gnuplot(script, dir, name) {
  const file = path.join(dir, `${name}.gp`);
  fs.writeFileSync(file, script);
  const r = spawnSync('gnuplot', [file], { cwd: dir, encoding: 'utf8', timeout: 30000 });
  if (r.status !== 0) {
    log(`gnuplot ${name}: ${r.stderr}`);
    return null;
  }
  return `${name}.svg`;
}

const SVG_HEAD = `set terminal svg size 720,420 dynamic noenhanced font "sans,12" background rgb "white"
set grid ytics lc rgb "#dddddd"
set border 3
set tics nomirror
`;

function cdfData(dir, name, latencies) {
  const file = path.join(dir, `${name}.dat`);
  const n = latencies.length;
  fs.writeFileSync(file, latencies.map((x, i) => `${x} ${(i + 1) / n}`).join('\n') + '\n');
  return path.basename(file);
}

function charts(dir, runs) {
  if (!hasGnuplot()) return { note: 'gnuplot is not installed: no charts (./fleet bench installs gnuplot-nox)', files: [] };
  const files = [];
  // 1. Fraud review: reviews per hour and the cached share, per proxy (medians over repeats).
  const fraud = runs.fraud;
  if (fraud.length) {
    const bars = path.join(dir, 'routing-fraud.dat');
    fs.writeFileSync(
      bars,
      fraud.map((r) => `"${r.label}" ${fmtNum(r.per_hour)} ${fmtNum(100 * r.cached_share)}`).join('\n') + '\n',
    );
    const f = gnuplot(
      `${SVG_HEAD}set output "routing-fraud.svg"
set title "${runs.fraudTitle}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set ylabel "reviews per simulated hour"
set y2label "prompt tokens served from cache (%)"
set yrange [0:*]
set y2range [0:100]
set y2tics
set key top left
plot "routing-fraud.dat" using 2:xtic(1) title "reviews / hour" lc rgb "#4472c4", \\
     "" using 3 axes x1y2 title "cached share %" lc rgb "#ed7d31"
`,
      dir,
      'routing-fraud',
    );
    if (f) files.push(f);
  }
  // 2. Latency distributions (CDF) of the fraud and mixed scenarios, and of the interactive
  // tenant's reviews (idle fleet and beside the batch; log scale: 28 s to minutes).
  for (const [scenario, title, extra = ''] of [
    ['fraud', 'Fraud review: latency per review (simulated s)'],
    ['mixed', 'Mixed speeds at 50% load (Poisson): latency (simulated s)'],
    ['tenants', 'Two tenants: interactive reviews, idle fleet and beside the batch (simulated s)', 'set logscale x\n'],
  ]) {
    const rs = runs[`${scenario}Latencies`];
    if (!rs?.length) continue;
    const plots = rs
      .filter((r) => r.latencies.length)
      .map((r) => `"${cdfData(dir, `routing-${scenario}-${r.key}`, r.latencies)}" using 1:2 with lines lw 2 title "${r.label}"`);
    if (!plots.length) continue;
    const f = gnuplot(
      `${SVG_HEAD}set output "routing-${scenario}-latency.svg"
set title "${title}"
set xlabel "latency (simulated seconds)"
set ylabel "share of requests"
set yrange [0:1]
set key bottom right
${extra}plot ${plots.join(', \\\n     ')}
`,
      dir,
      `routing-${scenario}-latency`,
    );
    if (f) files.push(f);
  }
  return { note: '', files };
}

function fmtNum(x) {
  return Number.isFinite(x) ? x.toFixed(3) : '0';
}

// ---------------------------------------------------------------------------------------------
// The scenario

export async function scenarioRouting(env) {
  const { BIN, OUT, TMP, QUICK, REPEATS, HAS, problems } = env;
  const dir = fs.mkdtempSync(path.join(TMP, 'routing-'));
  // T: the fast phones' time scale. 100: a simulated hour takes 36 s of wall time.
  const T = QUICK ? 1000 : 100;
  const simSeconds = (s) => (s / T) * 1000; // simulated seconds -> wall ms
  const N = QUICK ? 4 : 16;
  const slow = N / 4;
  const clients = QUICK ? 8 : 64;
  const warm = simSeconds(QUICK ? 300 : 600);
  const window = simSeconds(QUICK ? 2000 : 3600);
  const grace = simSeconds(QUICK ? 2000 : 1800);

  const policyKey = gatewayTakesPolicy(env, dir);
  if (!policyKey) log('routing: this gateway build has no routing.policy key; expected_finish is not measured');
  const proxies = [
    HAS.haproxy ? { key: 'haproxy', label: 'HAProxy leastconn + maxconn 1' } : null,
    { key: 'least_loaded', label: 'Fleetgate least_loaded', policy: policyKey ? 'least_loaded' : null },
    policyKey ? { key: 'expected_finish', label: 'Fleetgate expected_finish', policy: 'expected_finish' } : null,
  ].filter(Boolean);
  const start = async (proxy, agents) =>
    proxy.key === 'haproxy' ? startHaproxy(dir, agents) : startGateway(env, dir, agents, proxy.policy, T);

  const prefixRandom = rng(7);
  const prefixes = [0, 1, 2, 3].map((k) => text(5000 * CHARS_PER_TOKEN, prefixRandom, `Instruction set ${k}.`));
  const fraudBody = (random) => reviewBody(prefixes, random, 2000 * CHARS_PER_TOKEN, 8);
  const rows = [];
  const runs = {
    fraud: [], fraudLatencies: [], mixedLatencies: [], tenantsLatencies: [],
    fraudTitle: `Fraud review: ${N} one-slot phones (${slow} of them 4x slower), ${clients} clients`,
  };

  // ---- fraud review and two tenants: one fleet, fresh phones for every proxy (so no proxy finds
  // caches another one warmed).
  const fleetScales = Array.from({ length: N }, (_, i) => (i < slow ? T / 4 : T));
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const proxy of proxies) {
      const agents = await startAgents(BIN.agent, fleetScales);
      const p = await start(proxy, agents);
      try {
        log(`routing fraud: ${proxy.label} (repeat ${rep + 1})`);
        const t0 = performance.now();
        const records = await closedLoop({
          url: `${p.url}/v1/chat/completions`, clients, seed: rep + 1, endAt: t0 + warm + window,
          graceMs: grace, makeBody: fraudBody,
        });
        const f = figures(records, { from: t0 + warm, to: t0 + warm + window, timeScale: T });
        // Little's law for a closed loop: throughput = clients / mean latency (exact; counting
        // answers in the window is quantised by the few rounds each client makes).
        const perHour = (clients / f.mean_s) * 3600;
        rows.push({ scenario: 'fraud', repeat: rep + 1, proxy: proxy.key, ...strip(f), per_hour: perHour, counted_per_hour: f.per_hour });
        log(
          `  ${fmt(perHour, 0)} reviews/h (counted ${fmt(f.per_hour, 0)}), mean ${fmt(f.mean_s, 1)} s, ` +
            `p95 ${fmt(f.p95_s, 1)} s, cached ${fmt(100 * f.cached_share, 1)}%, failed ${f.failed}`,
        );
        if (f.count === 0) problems.push(`routing fraud ${proxy.key}: no successful review`);
        if (rep === 0) runs.fraudLatencies.push({ key: proxy.key, label: proxy.label, latencies: f.latencies });

        // Two tenants on the same phones (warm now): the interactive tenant alone, then beside
        // the batch flood.
        log(`routing tenants: ${proxy.label} (repeat ${rep + 1})`);
        const interactiveRate = N / 16 / 60; // per simulated second: one a minute on 16 phones
        const interactive = (endAt, seed) =>
          openLoop({
            url: `${p.url}/v1/chat/completions`, rate: interactiveRate * T, seed, endAt, graceMs: grace,
            makeBody: fraudBody, headers: { 'x-fleetgate-priority': '10' },
          });
        const t1 = performance.now();
        const idleRecords = await interactive(t1 + window, 100 + rep);
        const idle = figures(idleRecords, { from: t1, to: t1 + window, timeScale: T, byStart: true });
        const t2 = performance.now();
        const [batchRecords, busyRecords] = await Promise.all([
          closedLoop({
            url: `${p.url}/v1/chat/completions`, clients: (3 * clients) / 4, seed: 200 + rep,
            endAt: t2 + warm + window, graceMs: grace, makeBody: fraudBody,
          }),
          (async () => {
            await sleep(warm);
            return interactive(t2 + warm + window, 300 + rep);
          })(),
        ]);
        const busy = figures(busyRecords, { from: t2 + warm, to: t2 + warm + window, timeScale: T, byStart: true });
        if (rep === 0) {
          runs.tenantsLatencies.push(
            { key: `${proxy.key}-idle`, label: `${proxy.label}, idle fleet`, latencies: idle.latencies },
            { key: `${proxy.key}-batch`, label: `${proxy.label}, beside the batch`, latencies: busy.latencies },
          );
        }
        const batch = figures(batchRecords, { from: t2 + warm, to: t2 + warm + window, timeScale: T });
        rows.push({
          scenario: 'tenants', repeat: rep + 1, proxy: proxy.key, idle_p95_s: idle.p95_s, idle_mean_s: idle.mean_s,
          idle_count: idle.count, busy_p95_s: busy.p95_s, busy_mean_s: busy.mean_s, busy_count: busy.count,
          busy_failed: busy.failed, p95_ratio: busy.p95_s / idle.p95_s, batch_per_hour: batch.per_hour,
          batch_failed: batch.failed,
        });
        log(
          `  interactive p95 ${fmt(busy.p95_s, 1)} s beside the batch vs ${fmt(idle.p95_s, 1)} s idle ` +
            `(${fmt(busy.p95_s / idle.p95_s, 2)}x; ${busy.count} requests), batch ${fmt(batch.per_hour, 0)}/h`,
        );
        if (busy.count === 0) problems.push(`routing tenants ${proxy.key}: no interactive answer`);
      } finally {
        await stopAll([p.proc, ...agents.map((a) => a.proc)]);
      }
    }
  }

  // ---- mixed speeds: 8 phones, 4 of them 10x slower, unique prompts, Poisson at 50% load.
  const M = QUICK ? 4 : 8;
  const mixedScales = Array.from({ length: M }, (_, i) => (i < M / 2 ? T / 10 : T));
  const mixedService = 2000 / PREFILL_TPS + 15 / DECODE_TPS; // simulated seconds on a fast phone
  const capacity = (M / 2) * (1 / mixedService) + (M / 2) * (1 / (10 * mixedService)); // per sim s
  const mixedBody = (random) =>
    JSON.stringify({
      model: MODEL,
      max_tokens: 16,
      messages: [{ role: 'user', content: text(2000 * CHARS_PER_TOKEN, random, `Message ${Math.floor(random() * 1e12).toString(36)}:`) }],
    });
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const proxy of proxies) {
      const agents = await startAgents(BIN.agent, mixedScales);
      const p = await start(proxy, agents);
      try {
        log(`routing mixed: ${proxy.label} (repeat ${rep + 1})`);
        const t0 = performance.now();
        const records = await openLoop({
          url: `${p.url}/v1/chat/completions`, rate: 0.5 * capacity * T, seed: 400 + rep,
          endAt: t0 + warm + window, graceMs: grace, makeBody: mixedBody,
        });
        const f = figures(records, { from: t0 + warm, to: t0 + warm + window, timeScale: T, byStart: true });
        rows.push({ scenario: 'mixed', repeat: rep + 1, proxy: proxy.key, ...strip(f) });
        log(`  mean ${fmt(f.mean_s, 1)} s, p95 ${fmt(f.p95_s, 1)} s over ${f.count} requests, failed ${f.failed}`);
        if (f.count === 0) problems.push(`routing mixed ${proxy.key}: no successful request`);
        if (rep === 0) runs.mixedLatencies.push({ key: proxy.key, label: proxy.label, latencies: f.latencies });
      } finally {
        await stopAll([p.proc, ...agents.map((a) => a.proc)]);
      }
    }
  }

  // ---- tables
  const med = (scenario, proxy, key) =>
    median(rows.filter((r) => r.scenario === scenario && r.proxy === proxy).map((r) => r[key]));
  const spreadOf = (scenario, proxy, key, digits, scale = 1) =>
    fmtSpread(rows.filter((r) => r.scenario === scenario && r.proxy === proxy).map((r) => scale * r[key]), digits);
  const ratioTo = (scenario, key, proxy) => {
    const ratios = [];
    for (let rep = 1; rep <= REPEATS; rep++) {
      const a = rows.find((r) => r.scenario === scenario && r.proxy === proxy && r.repeat === rep);
      const b = rows.find((r) => r.scenario === scenario && r.proxy === 'haproxy' && r.repeat === rep);
      if (a && b) ratios.push(a[key] / b[key]);
    }
    return ratios;
  };
  for (const proxy of proxies) {
    runs.fraud.push({
      label: proxy.key === 'haproxy' ? 'HAProxy' : proxy.key,
      per_hour: med('fraud', proxy.key, 'per_hour'),
      cached_share: med('fraud', proxy.key, 'cached_share'),
    });
  }
  const chart = charts(OUT, runs);
  const fraudTable = proxies.map((proxy) => [
    proxy.label,
    spreadOf('fraud', proxy.key, 'per_hour', 0),
    proxy.key === 'haproxy' ? '1' : fmtSpread(ratioTo('fraud', 'per_hour', proxy.key), 2),
    spreadOf('fraud', proxy.key, 'mean_s', 1),
    spreadOf('fraud', proxy.key, 'p95_s', 1),
    spreadOf('fraud', proxy.key, 'cached_share', 1, 100),
    rows.filter((r) => r.scenario === 'fraud' && r.proxy === proxy.key).reduce((s, r) => s + r.failed, 0),
  ]);
  const mixedTable = proxies.map((proxy) => [
    proxy.label,
    spreadOf('mixed', proxy.key, 'mean_s', 1),
    proxy.key === 'haproxy' ? '1' : fmtSpread(ratioTo('mixed', 'mean_s', proxy.key), 2),
    spreadOf('mixed', proxy.key, 'p50_s', 1),
    spreadOf('mixed', proxy.key, 'p95_s', 1),
    fmt(med('mixed', proxy.key, 'count'), 0),
    rows.filter((r) => r.scenario === 'mixed' && r.proxy === proxy.key).reduce((s, r) => s + r.failed, 0),
  ]);
  const tenantTable = proxies.map((proxy) => [
    proxy.label,
    spreadOf('tenants', proxy.key, 'idle_p95_s', 1),
    spreadOf('tenants', proxy.key, 'busy_p95_s', 1),
    spreadOf('tenants', proxy.key, 'p95_ratio', 2),
    spreadOf('tenants', proxy.key, 'idle_mean_s', 1),
    spreadOf('tenants', proxy.key, 'busy_mean_s', 1),
    fmt(med('tenants', proxy.key, 'busy_count'), 0),
    spreadOf('tenants', proxy.key, 'batch_per_hour', 0),
  ]);
  const ef = proxies.find((p) => p.key === 'expected_finish');
  const headline = [];
  if (HAS.haproxy && ef) {
    headline.push(
      `fraud review: expected_finish does **${fmtSpread(ratioTo('fraud', 'per_hour', 'expected_finish'), 2)}x** HAProxy's reviews per hour (target >= 2.5x)`,
      `mixed speeds: mean latency **${fmt(100 * (1 - median(ratioTo('mixed', 'mean_s', 'expected_finish'))), 0)}% below** HAProxy's (target >= 50%)`,
      `two tenants: interactive p95 **${fmt(med('tenants', 'expected_finish', 'p95_ratio'), 2)}x** its idle-fleet p95 (target <= 1.5x; HAProxy ${fmt(med('tenants', 'haproxy', 'p95_ratio'), 2)}x)`,
    );
  }
  const md = `### 7. Routing: phones with prompt caches and different speeds

Simulated phones (\`${PROFILE}\`: ${fmt(PREFILL_TPS, 1)} prompt tokens/s, ${DECODE_TPS} generated/s, one slot,
llama.cpp's slot cache and timings; [simulator.md](simulator.md)) run ${T}x faster than real time, so
a simulated hour takes ${fmt(3600 / T, 0)} s; every time below is in **simulated** seconds. Each proxy gets
fresh phones (empty caches). ${REPEATS} repeat(s); cells: median (min–max). ${
    policyKey ? '' : '**This gateway build has no `routing.policy` key, so only `least_loaded` (its only policy) was measured.** '
  }Ratios are to HAProxy in the same repeat.
${headline.length ? `\n${headline.map((h) => `- ${h}`).join('\n')}\n` : ''}
**Fraud review.** ${N} phones, ${slow} of them 4x slower; ${clients} clients in a closed loop; each review
one of 4 instruction prefixes (5,000 tokens) at random plus a unique 2,000-token case, 8-token answer.
${fmt(window / 1000 * T / 60, 0)} simulated minutes after ${fmt(warm / 1000 * T / 60, 0)} of warm-up. Reviews per hour = clients / mean latency
(Little's law; the counted rate is in the CSV); cached = share of prompt tokens the phones reported
as cached (\`usage.prompt_tokens_details.cached_tokens\`).

${markdownTable(['proxy', 'reviews / hour', 'vs HAProxy', 'mean s', 'p95 s', 'cached %', 'failed'], fraudTable)}

**Mixed speeds.** ${M} phones, ${M / 2} of them 10x slower; unique 2,000-token prompts, 16-token answers;
Poisson arrivals at 50% of the fleet's capacity (${fmt(0.5 * capacity * 3600, 0)} per simulated hour).

${markdownTable(['proxy', 'mean s', 'vs HAProxy', 'p50 s', 'p95 s', 'requests', 'failed'], mixedTable)}

**Two tenants.** The fraud fleet (warm from the run above). The interactive tenant sends reviews
(Poisson, one per simulated minute, \`x-fleetgate-priority: 10\`) first alone ("idle"), then beside a
batch tenant's flood (${(3 * clients) / 4} clients in a closed loop, no priority header).

${markdownTable(['proxy', 'idle p95 s', 'beside batch p95 s', 'ratio', 'idle mean s', 'beside batch mean s', 'requests', 'batch reviews / hour'], tenantTable)}

(On this fleet the idle p95 is a review read whole on a slow phone, ~390 s, so the p95 ratio says
little by itself; the means show the wait behind the batch.)
${chart.files.length ? `\nCharts (SVG, next to the results): ${chart.files.map((f) => `\`${f}\``).join(', ')}.\n` : chart.note ? `\n${chart.note}\n` : ''}`;
  return { md, rows: rows.map(strip) };
}

function strip(f) {
  const { latencies, ...rest } = f;
  return rest;
}
