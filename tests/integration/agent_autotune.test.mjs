// engine.autotune with the real llama-server: the agent starts llama.cpp's server once per
// candidate setting (--threads x --batch-size), measures the reference job (prefill and decode
// speed from llama.cpp's timings), keeps the fastest by the documented score (the seconds the
// reference job takes: prompt_tokens / prefill + predict_tokens / decode, lowest wins) and runs
// the engine with it. Checks /health (loading while tuning, then the report), /metrics, the
// engine's command line, that every candidate process is gone, and that a chat completion works;
// then that candidates which all fail leave the engine running with the command as given; and
// that SIGTERM during tuning stops the candidate and the agent at once.
//
// Needs .cache/llama/bin/llama-server (scripts/llama/build.sh) and the tiny model
// (scripts/llama/make_tiny_model.py; made here when missing, ~15 s). Without them the file is
// SKIPPED with the reason. FLEETGATE_LLAMA_REQUIRED=1 turns such a skip into a failure;
// FLEETGATE_SKIP_LLAMA=1 skips on purpose. Overrides: FLEETGATE_LLAMA_SERVER,
// FLEETGATE_LLAMA_MODEL, FLEETGATE_LLAMA_CACHE, FLEETGATE_AGENT_BIN. See docs/agent.md.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, describe, test } from 'node:test';

import { REPO_ROOT, eventually, makeTempDir, metricValue, removeDir, request, toYaml } from './lib/gateway.mjs';
import { freePort, alive } from './lib/agent.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent');
const LLAMA_CACHE = process.env.FLEETGATE_LLAMA_CACHE || path.join(REPO_ROOT, '.cache', 'llama');
const LLAMA_SERVER = process.env.FLEETGATE_LLAMA_SERVER || path.join(LLAMA_CACHE, 'bin', 'llama-server');
const MODEL_FILE = process.env.FLEETGATE_LLAMA_MODEL || path.join(LLAMA_CACHE, 'models', 'tiny-qwen2.gguf');
const MAKE_MODEL = path.join(REPO_ROOT, 'scripts', 'llama', 'make_tiny_model.py');
const MODEL = 'tiny-qwen2';
const PARALLEL = 2;
const CONTEXT = 2048; // 1024 tokens per slot
const PROMPT_TOKENS = 256;
const PREDICT_TOKENS = 16; // short: a 2-thread candidate on a busy 2-core machine decodes at ~5 tok/s

// ---------------------------------------------------------------------------------------------
// Is the real engine here? (decided before any test runs, so that a skip names its reason)

const shown = (p) => (p.startsWith(`${REPO_ROOT}/`) ? path.relative(REPO_ROOT, p) : p);

function whyNotRunnable() {
  if (process.env.FLEETGATE_SKIP_LLAMA === '1') {
    return 'FLEETGATE_SKIP_LLAMA=1';
  }
  if (!fs.existsSync(LLAMA_SERVER)) {
    return `llama.cpp's llama-server is not built (${shown(LLAMA_SERVER)} missing): ` +
      'run scripts/llama/build.sh (about 10 minutes on 2 cores the first time, seconds with ccache)';
  }
  if (!fs.existsSync(MODEL_FILE)) {
    if (process.env.FLEETGATE_LLAMA_MODEL) {
      return `FLEETGATE_LLAMA_MODEL=${MODEL_FILE} does not exist`;
    }
    const r = spawnSync(MAKE_MODEL, ['--out', MODEL_FILE], { encoding: 'utf8', timeout: 120000 });
    if (r.status !== 0 || !fs.existsSync(MODEL_FILE)) {
      return `the tiny model ${shown(MODEL_FILE)} is missing and could not be made ` +
        `(scripts/llama/make_tiny_model.py: ${(r.stderr || r.error?.message || '').trim().split('\n').at(-1)})`;
    }
  }
  if (!fs.existsSync(AGENT_BIN)) {
    return `fleetgate-agent not found at ${AGENT_BIN}`;
  }
  const help = spawnSync(AGENT_BIN, ['--help'], { encoding: 'utf8' });
  if (!`${help.stdout}${help.stderr}`.includes('--autotune-threads')) {
    return `${AGENT_BIN} has no engine.autotune (its --help does not mention --autotune-threads)`;
  }
  return null;
}

const skipReason = whyNotRunnable();
if (skipReason && process.env.FLEETGATE_LLAMA_REQUIRED === '1' && process.env.FLEETGATE_SKIP_LLAMA !== '1') {
  throw new Error(`FLEETGATE_LLAMA_REQUIRED=1 but the autotune test cannot run: ${skipReason}`);
}

// ---------------------------------------------------------------------------------------------
// Helpers

const livePids = new Set();
process.on('exit', () => {
  for (const pid of livePids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

// llama-server's argv of a running process (to see the setting the agent chose).
function cmdline(pid) {
  return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((s) => s !== '');
}

// The value after the last occurrence of one of the flags in argv.
function flagValue(argv, names) {
  let value;
  for (let i = 1; i < argv.length - 1; i += 1) {
    if (names.includes(argv[i])) {
      value = argv[i + 1];
    }
  }
  return value;
}

function assertClose(actual, expected, what = '') {
  assert.ok(typeof actual === 'number' && Math.abs(actual - expected) <= 1e-9 * Math.abs(expected), `${what} ${actual} vs ${expected}`);
}

// The documented score: seconds of the reference job at the measured speeds.
const score = (c, report) => report.prompt_tokens / c.prefill_tps + report.predict_tokens / c.decode_tps;

// Starts an agent whose llama-server engine it tunes and then supervises. Resolves once it listens.
async function startAgent(name, autotune) {
  const enginePort = await freePort();
  const dir = makeTempDir(`fleetgate-autotune-${name}-`);
  const configPath = path.join(dir, 'agent.yaml');
  fs.writeFileSync(configPath, toYaml({
    listen: '127.0.0.1:0',
    model: MODEL,
    engine: {
      kind: 'llama-server',
      url: `http://127.0.0.1:${enginePort}`,
      command: [
        LLAMA_SERVER,
        '--model', MODEL_FILE,
        '--host', '127.0.0.1',
        '--port', String(enginePort),
        '--alias', MODEL,
        '--parallel', String(PARALLEL),
        '--ctx-size', String(CONTEXT),
        '--threads', '1', // replaced by each candidate's value
        '--no-webui',
      ],
      autotune,
    },
    drain_timeout: '2s',
    log: { level: 'info' },
  }));
  const proc = spawn(AGENT_BIN, ['--config', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  livePids.add(proc.pid);
  const agent = {
    name,
    proc,
    logs: [],
    text: '',
    base: null,
    exited: new Promise((resolve) => proc.once('exit', (code, signal) => {
      livePids.delete(proc.pid);
      resolve({ code, signal });
    })),
    // Every llama-server the agent started: candidates ("autotune: engine started") and the engine.
    enginePids() {
      return this.logs.filter((l) => (l.msg === 'engine started' || l.msg === 'autotune: engine started') && l.pid).map((l) => l.pid);
    },
    waitForLog(predicate, { timeoutMs = 15000, what = 'a log line' } = {}) {
      return eventually(() => this.logs.some(predicate), { timeoutMs, everyMs: 10, what: `${name}: ${what}` })
        .catch((e) => {
          e.message += `\n--- ${name} output (tail) ---\n${this.text.slice(-3000)}`;
          throw e;
        })
        .then(() => this.logs.find(predicate));
    },
    health() {
      return request(`${this.base}/health`, { timeoutMs: 3000 });
    },
    async waitForHealthOk(timeoutMs = 40000) {
      try {
        await eventually(async () => (await this.health()).status === 200, { timeoutMs, everyMs: 50, what: `${name}: /health 200` });
      } catch (e) {
        e.message += `\n--- ${name} output (tail) ---\n${this.text.slice(-3000)}`;
        throw e;
      }
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 8000);
        await this.exited;
        clearTimeout(timer);
      }
      for (const pid of this.enginePids()) {
        await eventually(() => !alive(pid), { timeoutMs: 6000, what: `${name}: llama-server pid ${pid} gone` }).catch(() => {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // gone
          }
        });
      }
      removeDir(dir);
    },
  };
  const collect = (stream, parse) => {
    const rl = createInterface({ input: stream });
    rl.on('line', (line) => {
      agent.text += `${line}\n`;
      if (agent.text.length > 200000) {
        agent.text = agent.text.slice(-100000);
      }
      if (!parse) {
        return;
      }
      try {
        const entry = JSON.parse(line);
        if (entry && typeof entry === 'object' && entry.msg) {
          agent.logs.push(entry);
          if (entry.pid && (entry.msg === 'engine started' || entry.msg === 'autotune: engine started')) {
            livePids.add(entry.pid);
          }
        }
      } catch {
        // llama-server's own output, mixed in
      }
    });
  };
  collect(proc.stderr, true);
  collect(proc.stdout, false);
  const listening = await agent.waitForLog((l) => l.msg === 'listening' && l.listener === 'agent', { timeoutMs: 10000, what: 'listening' });
  agent.base = `http://${listening.address}`;
  return agent;
}

// ---------------------------------------------------------------------------------------------

const suite = skipReason
  ? (name) => test(name, { skip: skipReason }, () => {})
  : describe;

suite('engine.autotune with the real llama-server', () => {
  const agents = [];
  after(async () => {
    await Promise.all(agents.map((a) => a.stop()));
  });

  test('tries each setting, keeps the fastest by the documented score, serves with it', async (t) => {
    const started = Date.now();
    const agent = await startAgent('tuned', {
      threads: [1, 2],
      batch_size: [64],
      prompt_tokens: PROMPT_TOKENS,
      predict_tokens: PREDICT_TOKENS,
    });
    agents.push(agent);

    // While tuning: loading, with the report in progress (candidates listed, none chosen yet).
    const early = await agent.health();
    assert.equal(early.status, 503, early.text);
    assert.equal(early.json.status, 'loading');
    assert.equal(early.json.autotune.state, 'running');
    assert.equal(early.json.autotune.chosen, null);
    assert.deepEqual(early.json.autotune.candidates.map((c) => [c.threads, c.batch_size]), [[1, 64], [2, 64]]);
    const completion = await request(`${agent.base}/v1/chat/completions`, {
      method: 'POST',
      body: { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(completion.status, 503, 'no completions while tuning');
    assert.equal(completion.json.error.code, 'model_loading');

    await agent.waitForHealthOk();
    const readyMs = Date.now() - started;
    const h = (await agent.health()).json;
    assert.equal(h.status, 'ok');
    assert.equal(h.slots_total, PARALLEL, 'slots still come from /props');
    const report = h.autotune;
    assert.equal(report.state, 'done', JSON.stringify(report));
    assert.equal(report.prompt_tokens, PROMPT_TOKENS);
    assert.equal(report.predict_tokens, PREDICT_TOKENS);
    assert.equal(report.candidates.length, 2);
    for (const c of report.candidates) {
      assert.equal(c.status, 'ok', JSON.stringify(c));
      assert.ok(Number.isFinite(c.prefill_tps) && c.prefill_tps > 0, `prefill_tps ${c.prefill_tps}`);
      assert.ok(Number.isFinite(c.decode_tps) && c.decode_tps > 0, `decode_tps ${c.decode_tps}`);
      assert.ok(Math.abs(c.seconds - score(c, report)) < 1e-9 * Math.max(1, c.seconds), `seconds ${c.seconds} = the score`);
    }
    const fastest = report.candidates.reduce((best, c) => (c.seconds < best.seconds ? c : best));
    assert.deepEqual(report.chosen, { threads: fastest.threads, batch_size: fastest.batch_size });

    // The metrics: one series per candidate, chosen = 1 on the chosen one only.
    const metrics = (await request(`${agent.base}/metrics`)).text;
    for (const c of report.candidates) {
      const labels = { threads: String(c.threads), batch_size: String(c.batch_size) };
      // Prometheus prints fewer digits than JSON: equal up to rounding.
      assertClose(metricValue(metrics, 'fleetgate_agent_autotune_prefill_tokens_per_second', labels), c.prefill_tps);
      assertClose(metricValue(metrics, 'fleetgate_agent_autotune_decode_tokens_per_second', labels), c.decode_tps);
      assertClose(metricValue(metrics, 'fleetgate_agent_autotune_reference_seconds', labels), c.seconds);
    }
    const chosenLabels = { threads: String(report.chosen.threads), batch_size: String(report.chosen.batch_size) };
    assert.equal(metricValue(metrics, 'fleetgate_agent_autotune_chosen', chosenLabels), 1);
    assert.equal(metrics.split('\n').filter((l) => l.startsWith('fleetgate_agent_autotune_chosen{')).length, 1);

    // The engine runs with the chosen setting; every candidate process is gone.
    const candidatePids = agent.logs.filter((l) => l.msg === 'autotune: engine started').map((l) => l.pid);
    assert.equal(candidatePids.length, 2);
    for (const pid of candidatePids) {
      assert.ok(!alive(pid), `candidate llama-server ${pid} stopped`);
    }
    const engine = agent.logs.filter((l) => l.msg === 'engine started').at(-1);
    const argv = cmdline(engine.pid);
    assert.equal(flagValue(argv, ['-t', '--threads']), String(report.chosen.threads), argv.join(' '));
    assert.equal(flagValue(argv, ['-b', '--batch-size', '--batch_size']), String(report.chosen.batch_size), argv.join(' '));
    assert.equal(argv.filter((a) => a === '--threads').length, 1, 'the command\'s --threads was replaced, not repeated');
    const chosenLog = agent.logs.find((l) => l.msg === 'autotune: chosen');
    assert.equal(chosenLog.threads, report.chosen.threads);

    // It serves.
    const chat = await request(`${agent.base}/v1/chat/completions`, {
      method: 'POST',
      body: { model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'Is this transaction risky?' }] },
    });
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.json.usage.completion_tokens, 8);
    assert.equal(chat.json.choices[0].message.role, 'assistant');

    t.diagnostic(`ready after ${readyMs} ms (tuning took ${chosenLog.took_ms} ms); ` +
      report.candidates.map((c) => `threads=${c.threads} batch_size=${c.batch_size}: prefill ${c.prefill_tps.toFixed(0)} tok/s, ` +
        `decode ${c.decode_tps.toFixed(0)} tok/s, ${(c.seconds * 1000).toFixed(1)} ms`).join('; ') +
      `; chosen threads=${report.chosen.threads}`);
  });

  test('when every candidate fails, the engine starts with the command as given', async () => {
    // A reference prompt longer than a slot's context (1024 tokens): llama.cpp refuses it with 400.
    const agent = await startAgent('all-fail', { threads: [1, 2], prompt_tokens: 1500, predict_tokens: 8 });
    agents.push(agent);
    await agent.waitForHealthOk();
    const report = (await agent.health()).json.autotune;
    assert.equal(report.state, 'failed');
    assert.equal(report.chosen, null);
    assert.deepEqual(report.candidates.map((c) => [c.threads, c.batch_size, c.status]), [[1, null, 'failed'], [2, null, 'failed']]);
    for (const c of report.candidates) {
      assert.match(c.error, /reference job: HTTP 400 .*exceeds the available context size/);
    }
    assert.ok(agent.logs.some((l) => l.level === 'error' && l.msg.startsWith('autotune: every candidate failed')));
    const engine = agent.logs.filter((l) => l.msg === 'engine started').at(-1);
    assert.equal(flagValue(cmdline(engine.pid), ['-t', '--threads']), '1', 'the configured --threads');
    const metrics = (await request(`${agent.base}/metrics`)).text;
    assert.equal(metricValue(metrics, 'fleetgate_agent_autotune_chosen'), undefined);
    const chat = await request(`${agent.base}/v1/chat/completions`, {
      method: 'POST',
      body: { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(chat.status, 200, chat.text);
  });

  test('SIGTERM while tuning stops the candidate and the agent', async () => {
    const agent = await startAgent('stopped', { threads: [1, 2], batch_size: [64, 128] });
    agents.push(agent);
    const candidate = await agent.waitForLog((l) => l.msg === 'autotune: engine started', { what: 'a candidate started' });
    agent.proc.kill('SIGTERM');
    // No duration bound (it measured the machine: a candidate busy with its reference job may
    // take the agent's whole 5 s grace before SIGKILL, and the agent then exits): the deadline is
    // only there to fail rather than hang.
    let timer;
    const { code } = await Promise.race([
      agent.exited,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the agent did not exit after SIGTERM\n${agent.text.slice(-2000)}`)), 30000);
      }),
    ]).finally(() => clearTimeout(timer));
    assert.equal(code, 0, agent.text.slice(-2000));
    assert.ok(!alive(candidate.pid), 'the candidate llama-server is gone');
    assert.ok(!agent.logs.some((l) => l.msg === 'engine started'), 'no engine started after the signal');
  });
});
