// The batch benchmark (./fleet bench batch; issue 14, docs/batch.md "Figures"): the OpenAI Batch
// API of the gateway over simulated phones.
//   throughput   the fraud-review workload of the routing bench (one ~5,000-token instruction
//                prefix shared by every line, a unique ~2,000-token case, 8-token answers) as
//                one batch over one-slot 4B phones, a quarter of them 4x slower: lines per
//                (simulated) hour against the fleet's ideal, the sum of the phones' capacities
//                computed from the profile's speeds with the shared prefix always cached;
//                meanwhile an interactive tenant's reviews (Poisson), whose p95 is set beside
//                the same tenant's p95 on the idle fleet just before.
//   rss          a 100,000-line batch of tiny requests (fast-test phones, 8 x 8 slots): the
//                gateway's peak RSS (VmHWM) from the upload to the last result.
//                (FLEETGATE_BENCH_BATCH=throughput runs this part alone;
//                FLEETGATE_BENCH_BATCH_INTERACTIVE=0 runs the batch without interactive traffic.)
//   restart      a gateway killed with SIGKILL midway through a batch and started again on the
//                same database: time from the new process's start to its first new result, on
//                SQLite and (when its binaries are installed) PostgreSQL; every custom_id is
//                then checked to be in the output exactly once.
// Figures are printed and written, never asserted: the command fails only when the tool is
// broken (a process did not start, a batch did not complete).

import fs from 'node:fs';
import path from 'node:path';

import { Proc, cpuSeconds, fmt, freePorts, log, markdownTable, sleep, stopAll, waitForHttp, waitForPort } from './lib.mjs';
import { CHARS_PER_TOKEN, DECODE_TPS, MODEL, PREFILL_TPS, rng, startAgents, text } from './routing.mjs';

const MIB = 1024 * 1024;

function vm(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(status)?.[1] ?? NaN);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
}

// timeScale: the phones run that many times faster than real time, so the routing knobs that
// are durations of phone work shrink by as much, as in routing.mjs: hold_min_gain (1 s by
// default) would otherwise be worth 100 simulated seconds at 100x, and an interactive review
// would take a free slow phone (~111 s) rather than wait for a fast one (~28 s once it frees).
function gatewayYaml({ publicPort, adminPort, agents, slots, storage, batch, timeScale = 1 }) {
  const endpoints = agents.map((a) => `      - {url: ${JSON.stringify(a.url)}, slots: ${slots}}`).join('\n');
  const section = (name, obj) =>
    `${name}:\n${Object.entries(obj)
      .map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`)
      .join('\n')}\n`;
  return `# written by tests/bench/batch.mjs
server:
  listen: 127.0.0.1:${publicPort}
admin:
  listen: 127.0.0.1:${adminPort}
models:
  - name: ${MODEL}
    slots: ${slots}
    endpoints:
${endpoints}
routing:
  hold_min_gain: ${Math.max(1, Math.round(1000 / timeScale))}ms
  reserve_window: ${Math.max(1, Math.round(600000 / timeScale))}ms
  queue_max: 100000
  queue_timeout: 3600s
  request_timeout: 3600s
upstream:
  max_idle_per_replica: 64
${section('storage', storage)}${section('batch', batch)}log:
  level: warn
`;
}

// A gateway on the given ports (kept across a restart), database and phones.
async function startGateway(env, { dir, ports, agents, slots, storage, batch, procEnv, timeScale }) {
  const [publicPort, adminPort] = ports;
  const file = path.join(dir, `fleetgate-${publicPort}.yaml`);
  fs.writeFileSync(file, gatewayYaml({ publicPort, adminPort, agents, slots, storage, batch, timeScale }));
  const started = performance.now();
  const proc = new Proc('fleetgate', env.BIN.gateway, ['--config', file], { env: { ...process.env, ...procEnv } });
  await waitForHttp(`http://127.0.0.1:${adminPort}/healthz`, { proc, timeoutMs: 30000 });
  await waitForPort(publicPort, { proc, timeoutMs: 30000 });
  return { proc, started, url: `http://127.0.0.1:${publicPort}` };
}

async function api(gw, method, route, body) {
  const res = await fetch(`${gw.url}${route}`, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const textBody = await res.text();
  if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${textBody.slice(0, 200)}`);
  return JSON.parse(textBody);
}

// Uploads a JSONL file from disk (streamed with fs.openAsBlob, Node >= 19.8; read whole before,
// as Debian 12's Node 18 has no openAsBlob) and creates its batch.
async function submit(gw, file) {
  const form = new FormData();
  form.append('purpose', 'batch');
  const blob = fs.openAsBlob ? await fs.openAsBlob(file) : new Blob([fs.readFileSync(file)]);
  form.append('file', blob, path.basename(file));
  const res = await fetch(`${gw.url}/v1/files`, { method: 'POST', body: form });
  const uploaded = await res.json();
  if (!res.ok) throw new Error(`upload: ${res.status} ${JSON.stringify(uploaded).slice(0, 200)}`);
  return api(gw, 'POST', '/v1/batches', { input_file_id: uploaded.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
}

const ENDED = ['completed', 'failed', 'expired', 'cancelled'];

// Polls the batch every `everyMs` until it ends (or `deadlineMs` passes); calls onSample with
// (wall ms, batch) at each poll.
async function follow(gw, id, { everyMs = 250, deadlineMs = 3600_000, onSample = () => {} } = {}) {
  const until = performance.now() + deadlineMs;
  for (;;) {
    const batch = await api(gw, 'GET', `/v1/batches/${id}`);
    onSample(performance.now(), batch);
    if (ENDED.includes(batch.status)) return batch;
    if (performance.now() > until) throw new Error(`batch ${id} still ${batch.status} after ${deadlineMs} ms`);
    await sleep(everyMs);
  }
}

function writeLines(file, n, makeLine) {
  const fd = fs.openSync(file, 'w');
  let block = '';
  for (let i = 0; i < n; i++) {
    block += makeLine(i) + '\n';
    if (block.length > MIB) {
      fs.writeSync(fd, block);
      block = '';
    }
  }
  fs.writeSync(fd, block);
  fs.closeSync(fd);
  return fs.statSync(file).size;
}

function tinyLine(i) {
  return JSON.stringify({
    custom_id: `tx-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: `Transaction ${i}: 3 cards, 2 countries. Risk?` }] },
  });
}

// Interactive reviews (Poisson arrivals at `rate` per wall second until stop() says so);
// latencies in wall ms of the answers with status 200, sorted.
async function interactive(gw, { rate, seed, stop, makeBody }) {
  const random = rng(seed);
  const pending = [];
  const lat = [];
  let failed = 0;
  let next = performance.now();
  while (!stop()) {
    const wait = next - performance.now();
    if (wait > 0) await sleep(Math.min(wait, 50));
    if (performance.now() < next) continue;
    const body = makeBody(random);
    pending.push(
      (async () => {
        const t = performance.now();
        try {
          const res = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
          await res.arrayBuffer();
          if (res.status === 200) lat.push(performance.now() - t);
          else failed++;
        } catch {
          failed++;
        }
      })(),
    );
    next += (-Math.log(1 - random()) / rate) * 1000;
  }
  await Promise.all(pending);
  lat.sort((a, b) => a - b);
  return { lat, failed };
}

const quantile = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN);

// ---------------------------------------------------------------------------------------------

async function throughput(env, dir, rows) {
  const { QUICK } = env;
  const T = QUICK ? 1000 : 100; // the fast phones' time scale
  const N = QUICK ? 4 : 8;
  const slow = N / 4;
  const L = QUICK ? 120 : 1500;
  const scales = Array.from({ length: N }, (_, i) => (i < slow ? T / 4 : T));
  const prefix = text(5000 * CHARS_PER_TOKEN, rng(7), 'Instruction set 0.');
  const caseText = (random) => text(2000 * CHARS_PER_TOKEN, random, `Case ${Math.floor(random() * 1e12).toString(36)}:`);
  const review = (random) => ({
    model: MODEL,
    max_tokens: 8,
    messages: [
      { role: 'system', content: prefix },
      { role: 'user', content: caseText(random) },
    ],
  });
  // Simulated seconds per review on a fast phone with the prefix cached; the ideal counts every
  // phone busy all the time at that speed (a slow phone at a quarter of it).
  const service = 2000 / PREFILL_TPS + 8 / DECODE_TPS;
  const ideal = (N - slow) * (3600 / service) + slow * (3600 / (4 * service)); // lines per sim hour
  const file = path.join(dir, 'fraud.jsonl');
  const random = rng(11);
  const bytes = writeLines(file, L, (i) => JSON.stringify({ custom_id: `review-${i}`, method: 'POST', url: '/v1/chat/completions', body: review(random) }));

  const agents = await startAgents(env.BIN.agent, scales);
  let gw;
  try {
    gw = await startGateway(env, {
      dir, ports: await freePorts(2), agents, slots: 1, timeScale: T,
      storage: { path: path.join(dir, 'throughput.db') },
      batch: { max_lines: 100000, poll_interval: '200ms' },
    });
    // Interactive reviews: one per simulated minute per 4 phones (the same prefix, so cached).
    const rate = ((N / 4) * T) / 60;
    const body = (r) => JSON.stringify(review(r));
    // Warm every phone's cache with the prefix first (the batch's first lines would do it too,
    // but the idle measurement must not pay for it).
    await Promise.all(agents.map((_, i) => fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(rng(900 + i)) }).then((r) => r.arrayBuffer())));
    // The reference: the same reviews sent by 2N interactive clients in a closed loop (no batch),
    // what the request path itself achieves over these phones on this machine.
    const loopWindow = ((QUICK ? 600 : 1800) / T) * 1000;
    const loopStart = performance.now() + loopWindow / 4; // after a warm-up
    const loopEnd = loopStart + loopWindow;
    let loopCount = 0;
    await Promise.all(
      Array.from({ length: 2 * N }, async (_, c) => {
        const r = rng(500 + c);
        while (performance.now() < loopEnd) {
          const res = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(r) });
          await res.arrayBuffer();
          const t = performance.now();
          if (res.status === 200 && t >= loopStart && t <= loopEnd) loopCount++;
        }
      }),
    );
    const loopPerHour = loopCount / ((loopWindow / 1000) * (T / 3600));
    log(`batch throughput: ${2 * N} clients in a closed loop, no batch: ${fmt(loopPerHour, 0)} reviews/h (${fmt((100 * loopPerHour) / ideal, 1)}% of the ideal)`);
    const idleWindow = ((QUICK ? 600 : 1800) / T) * 1000; // wall ms
    log(`batch throughput: interactive on the idle fleet (${fmt(idleWindow / 1000, 0)} s)`);
    const idleEnd = performance.now() + idleWindow;
    const idle = await interactive(gw, { rate, seed: 21, stop: () => performance.now() >= idleEnd, makeBody: body });

    log(`batch throughput: ${L} lines (${fmt(bytes / MIB, 1)} MiB) over ${N} phones (${slow} 4x slower), ${T}x real time`);
    const t0 = performance.now();
    const cpu0 = cpuSeconds(gw.proc.pid);
    const batch = await submit(gw, file);
    const samples = [];
    let stopInteractive = false;
    const during = (async () => {
      // Interactive traffic from the batch's first completed line to its last.
      while (!stopInteractive && !samples.some((s) => s.done > 0)) await sleep(20);
      if (process.env.FLEETGATE_BENCH_BATCH_INTERACTIVE === '0') return { lat: [], failed: 0 };
      return interactive(gw, { rate, seed: 31, stop: () => stopInteractive, makeBody: body });
    })();
    const done = await follow(gw, batch.id, {
      everyMs: QUICK ? 50 : 250,
      onSample: (t, b) => samples.push({ t, done: b.request_counts.completed + b.request_counts.failed }),
      deadlineMs: QUICK ? 60_000 : 1800_000,
    });
    stopInteractive = true;
    const gatewayCpu = (cpuSeconds(gw.proc.pid) - cpu0) / ((performance.now() - t0) / 1000);
    const busy = await during;
    const wall = (performance.now() - t0) / 1000;
    if (done.status !== 'completed' || done.request_counts.completed !== L) {
      throw new Error(`throughput batch ended ${done.status} ${JSON.stringify(done.request_counts)}`);
    }
    // Where the phones' time went: the share of prompt tokens they served from their cache, and
    // how busy they were (their reported prompt + generation time, in wall ms as the agents run
    // it, over phones x the batch's wall time).
    const output = await (await fetch(`${gw.url}/v1/files/${done.output_file_id}/content`)).text();
    let prompt = 0;
    let cached = 0;
    let busyMs = 0;
    for (const l of output.split('\n')) {
      if (!l) continue;
      const b = JSON.parse(l).response?.body;
      prompt += b?.usage?.prompt_tokens ?? 0;
      cached += b?.usage?.prompt_tokens_details?.cached_tokens ?? 0;
      busyMs += (b?.timings?.prompt_ms ?? 0) + (b?.timings?.predicted_ms ?? 0);
    }
    // The steady rate: between 10% and 90% of the lines done (without the cold start and the
    // tail of the last lines on slow phones).
    const at = (share) => samples.find((s) => s.done >= share * L);
    const a = at(0.1);
    const b = at(0.9);
    const steadySimHours = ((b.t - a.t) / 1000) * (T / 3600);
    const steady = (b.done - a.done) / steadySimHours;
    const overall = L / (wall * (T / 3600));
    const interactivePerHour = (busy.lat.length / ((samples.at(-1).t - t0) / 1000)) * (3600 / T);
    const simS = (ms) => (ms / 1000) * T;
    const row = {
      scenario: 'throughput', lines: L, input_mib: bytes / MIB, phones: N, slow, time_scale: T,
      ideal_per_hour: ideal, steady_per_hour: steady, overall_per_hour: overall, efficiency: steady / ideal,
      interactive_per_hour: interactivePerHour, with_interactive_efficiency: (steady + interactivePerHour) / ideal,
      wall_s: wall, idle_p95_s: simS(quantile(idle.lat, 0.95)), idle_p50_s: simS(quantile(idle.lat, 0.5)), idle_n: idle.lat.length,
      busy_p95_s: simS(quantile(busy.lat, 0.95)), busy_p50_s: simS(quantile(busy.lat, 0.5)), busy_n: busy.lat.length,
      interactive_failed: idle.failed + busy.failed,
      cached_share: prompt ? cached / prompt : NaN,
      closed_loop_per_hour: loopPerHour,
      gateway_cpu_share: gatewayCpu, // of one core, from the upload to the last result
      closed_loop_efficiency: loopPerHour / ideal,
      // Batch lines only (the interactive requests' phone time is not in the output file).
      phone_busy_share: busyMs / (N * (samples.at(-1).t - t0)),
    };
    rows.push(row);
    log(
      `  ${fmt(steady, 0)} lines/h steady (${fmt(100 * row.efficiency, 1)}% of the ideal ${fmt(ideal, 0)}; overall ${fmt(overall, 0)}/h), ` +
        `interactive p95 ${fmt(row.busy_p95_s, 1)} s during vs ${fmt(row.idle_p95_s, 1)} s idle (${busy.lat.length}/${idle.lat.length} requests); ` +
        `cached ${fmt(100 * row.cached_share, 1)}% of prompt tokens, phones busy with batch lines ${fmt(100 * row.phone_busy_share, 1)}% of the time, ` +
        `gateway CPU ${fmt(100 * gatewayCpu, 1)}% of a core`,
    );
    return row;
  } finally {
    await stopAll([gw?.proc, ...agents.map((x) => x.proc)]);
  }
}

async function rss(env, dir, rows, phones) {
  const L = env.QUICK ? 2000 : 100000;
  const file = path.join(dir, 'rss.jsonl');
  const bytes = writeLines(file, L, tinyLine);
  let gw;
  try {
    gw = await startGateway(env, {
      dir, ports: await freePorts(2), agents: phones, slots: 8,
      storage: { path: path.join(dir, 'rss.db') },
      batch: { max_lines: L, poll_interval: '200ms' },
    });
    const idle = vm(gw.proc.pid);
    log(`batch rss: ${L} lines (${fmt(bytes / MIB, 1)} MiB) over ${phones.length} phones x 8 slots`);
    const t0 = performance.now();
    const batch = await submit(gw, file);
    const uploaded = vm(gw.proc.pid);
    const done = await follow(gw, batch.id, { everyMs: 1000, deadlineMs: env.QUICK ? 60_000 : 1800_000 });
    const end = vm(gw.proc.pid);
    const seconds = (performance.now() - t0) / 1000;
    if (done.status !== 'completed') throw new Error(`rss batch ended ${done.status} ${JSON.stringify(done.request_counts)}`);
    const row = {
      scenario: 'rss', lines: L, input_mib: bytes / MIB, rss_idle_mib: idle.rss, hwm_after_upload_mib: uploaded.hwm,
      rss_peak_mib: end.hwm, rss_end_mib: end.rss, seconds, lines_per_second: L / seconds,
      completed: done.request_counts.completed, failed: done.request_counts.failed,
    };
    rows.push(row);
    log(`  peak RSS ${fmt(end.hwm, 2)} MiB (idle ${fmt(idle.rss, 2)}, after the upload ${fmt(uploaded.hwm, 2)}), ${fmt(seconds, 0)} s, ${fmt(row.lines_per_second, 0)} lines/s`);
    return row;
  } finally {
    await stopAll([gw?.proc]);
  }
}

async function restart(env, dir, rows, phones, backend) {
  const L = env.QUICK ? 1500 : 6000;
  const file = path.join(dir, `restart-${backend}.jsonl`);
  writeLines(file, L, tinyLine);
  let pg = null;
  let storage = { path: path.join(dir, 'restart.db') };
  let procEnv = {};
  if (backend === 'postgres') {
    const { startPostgres } = await import('../integration/lib/postgres.mjs');
    pg = await startPostgres();
    storage = { backend: 'postgres', url_env: 'FG_BENCH_DATABASE_URL' };
    procEnv = { FG_BENCH_DATABASE_URL: pg.url };
  }
  const setup = {
    dir, ports: await freePorts(2), agents: phones, slots: 8, storage, procEnv,
    // PostgreSQL: the dead instance's leased lines wait for their lease; the rest resume at once.
    batch: { max_lines: L, poll_interval: '100ms', lease_timeout: '2s' },
  };
  let gw;
  try {
    gw = await startGateway(env, setup);
    const batch = await submit(gw, file);
    let before = 0;
    await follow(gw, batch.id, {
      everyMs: 20,
      onSample: (_, b) => {
        before = b.request_counts.completed;
        if (before >= L * 0.3) throw Object.assign(new Error('midway'), { midway: true });
      },
    }).catch((e) => {
      if (!e.midway) throw e;
    });
    gw.proc.child.kill('SIGKILL');
    await gw.proc.done;
    gw = await startGateway(env, setup);
    const listening = performance.now();
    let first = null;
    let resumed = null;
    const done = await follow(gw, batch.id, {
      everyMs: 10,
      onSample: (t, b) => {
        first ??= b.request_counts.completed;
        if (resumed === null && b.request_counts.completed > first) resumed = t;
      },
    });
    const out = await (await fetch(`${gw.url}/v1/files/${done.output_file_id}/content`)).text();
    const ids = out.split('\n').filter(Boolean).map((l) => JSON.parse(l).custom_id);
    const unique = new Set(ids).size;
    const row = {
      scenario: 'restart', backend, lines: L, killed_at_completed: before,
      start_to_listening_ms: listening - gw.started, start_to_resume_ms: (resumed ?? NaN) - gw.started,
      status: done.status, output_lines: ids.length, unique_ids: unique,
    };
    rows.push(row);
    log(
      `  ${backend}: killed at ${before}/${L}; new process to listening ${fmt(row.start_to_listening_ms, 0)} ms, ` +
        `to its first new result ${fmt(row.start_to_resume_ms, 0)} ms; ${done.status}, ${ids.length} output lines, ${unique} distinct`,
    );
    if (done.status !== 'completed' || ids.length !== L || unique !== L) {
      env.problems.push(`batch restart ${backend}: ${done.status}, ${ids.length} output lines, ${unique} distinct of ${L}`);
    }
    return row;
  } finally {
    await stopAll([gw?.proc]);
    await pg?.stop();
  }
}

export async function scenarioBatch(env) {
  const { TMP, QUICK } = env;
  const dir = fs.mkdtempSync(path.join(TMP, 'batch-'));
  const rows = [];
  const tp = await throughput(env, dir, rows);
  if (process.env.FLEETGATE_BENCH_BATCH === 'throughput') {
    return { md: `### 8. Batch (throughput only)\n\n${JSON.stringify(tp)}\n`, rows };
  }
  const phones = await startAgents(env.BIN.agent, Array(QUICK ? 4 : 8).fill(50), { profile: 'fast-test', slots: 8 });
  let mem;
  const restarts = [];
  try {
    mem = await rss(env, dir, rows, phones);
    restarts.push(await restart(env, dir, rows, phones, 'sqlite'));
    let pgSkip = 'PostgreSQL: not measured in --quick';
    if (!QUICK) {
      const { postgresSkipReason } = await import('../integration/lib/postgres.mjs');
      pgSkip = postgresSkipReason();
    }
    if (pgSkip) log(`batch restart: ${pgSkip}`);
    else restarts.push(await restart(env, dir, rows, phones, 'postgres'));
  } finally {
    await stopAll(phones.map((p) => p.proc));
  }
  const md = `### 8. Batch: the Batch API over simulated phones

**Throughput and interactive latency.** One batch of ${tp.lines} fraud reviews (${fmt(tp.input_mib, 1)} MiB: one
5,000-token instruction prefix shared by every line, a unique 2,000-token case, 8-token answers)
over ${tp.phones} one-slot 4B phones (${tp.slow} of them 4x slower) run ${tp.time_scale}x faster than real time; times in
simulated seconds. Ideal = the sum of the phones' capacities at the profile's speeds with the prefix
cached (${fmt(2000 / PREFILL_TPS + 8 / DECODE_TPS, 1)} s per review on a fast phone). Steady = lines per hour while 10% to 90% of the
batch was done. Meanwhile an interactive tenant sent the same reviews (Poisson, one per simulated
minute per 4 phones); its p95 beside its p95 on the idle fleet just before.

${markdownTable(
  ['ideal lines / h', 'batch lines / h (steady)', 'of ideal', 'with the interactive work', 'whole batch lines / h', 'interactive p95 idle s', 'interactive p95 during s', 'p50 idle / during s', 'requests idle / during'],
  [[
    fmt(tp.ideal_per_hour, 0), fmt(tp.steady_per_hour, 0), `${fmt(100 * tp.efficiency, 1)}%`, `${fmt(100 * tp.with_interactive_efficiency, 1)}%`,
    fmt(tp.overall_per_hour, 0), fmt(tp.idle_p95_s, 1), fmt(tp.busy_p95_s, 1), `${fmt(tp.idle_p50_s, 1)} / ${fmt(tp.busy_p50_s, 1)}`,
    `${tp.idle_n} / ${tp.busy_n}`,
  ]],
)}

For reference, the same reviews sent by ${2 * tp.phones} clients in a closed loop through the gateway (no batch):
${fmt(tp.closed_loop_per_hour, 0)} reviews per hour, ${fmt(100 * tp.closed_loop_efficiency, 1)}% of the ideal.
Where the phones' time went: ${fmt(100 * tp.cached_share, 1)}% of the batch lines' prompt tokens were served from the
phones' caches, and the phones were busy with batch lines ${fmt(100 * tp.phone_busy_share, 1)}% of the batch's wall time (their
reported prompt + generation times over phones x wall time; the interactive requests' share is not
in it); the gateway used ${fmt(100 * tp.gateway_cpu_share, 1)}% of a core from the upload to the last result.

**Memory.** ${mem.lines} tiny lines (${fmt(mem.input_mib, 2)} MiB, \`max_tokens: 1\`) over ${phones.length} fast-test phones x 8 slots;
the gateway's RSS (VmHWM: the peak) from before the upload to the last result.

${markdownTable(
  ['lines', 'RSS idle MiB', 'peak after the upload MiB', 'peak MiB', 'RSS at the end MiB', 'seconds', 'lines / s'],
  [[mem.lines, fmt(mem.rss_idle_mib, 2), fmt(mem.hwm_after_upload_mib, 2), fmt(mem.rss_peak_mib, 2), fmt(mem.rss_end_mib, 2), fmt(mem.seconds, 0), fmt(mem.lines_per_second, 0)]],
)}

**Restart to resume.** A batch of tiny lines on the same phones; the gateway is killed with SIGKILL
once 30% of its lines are done and started again on the same database; times from the new
process's start (PostgreSQL: \`lease_timeout: 2s\`, the dead instance's leased lines wait for it).

${markdownTable(
  ['backend', 'lines', 'killed at', 'start to listening ms', 'start to first new result ms', 'status', 'output lines', 'distinct custom_ids'],
  restarts.map((r) => [r.backend, r.lines, r.killed_at_completed, fmt(r.start_to_listening_ms, 0), fmt(r.start_to_resume_ms, 0), r.status, r.output_lines, r.unique_ids]),
)}
`;
  fs.rmSync(dir, { recursive: true, force: true });
  return { md, rows };
}
