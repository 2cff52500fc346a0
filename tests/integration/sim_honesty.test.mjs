// Is the simulator honest about llama.cpp's prompt cache? The same sequence of prompts goes to a
// real llama-server (the tiny model of scripts/llama/make_tiny_model.py, 2 slots) and to a
// simulated phone configured alike (2 slots, the same --slot-prompt-similarity, a host prompt
// cache or none), one request at a time; the cached tokens each reports
// (usage.prompt_tokens_details.cached_tokens) must agree within one prompt block of the gateway
// (128 bytes, 32 tokens), request by request. The sequence exercises the slot choice by
// similarity, the least recently used slot, and (with --cache-ram) restoring a displaced prompt
// from the host cache; docs/simulator.md gives the rules.
//
// And is the gateway right about it? The same sequence goes through a gateway in front of the
// real llama-server: what the gateway's prompt-cache model expected the phone to reuse
// (fleetgate_prompt_cache_predicted_blocks_total) must be what llama-server reported
// (..._reported_blocks_total), within one block, request by request.
//
// Prompts are made of 4-character words (" the", " and", ...): one token each for llama.cpp's
// tokenizer and for the simulator's 4-characters-per-token rule, so counts compare directly.
//
// Needs .cache/llama/bin/llama-server and the tiny model (made from the llama.cpp source tree
// when missing); without them the file is SKIPPED with the reason (FLEETGATE_SKIP_LLAMA=1 skips on
// purpose), like llama_e2e.test.mjs.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { AGENT_BIN, freePort, startAgent, stopAgent } from './lib/agent.mjs';
import { REPO_ROOT, eventually, metricValue, request, startGateway, stopChecked } from './lib/gateway.mjs';

const LLAMA_CACHE = process.env.FLEETGATE_LLAMA_CACHE || path.join(REPO_ROOT, '.cache', 'llama');
const LLAMA_SERVER = process.env.FLEETGATE_LLAMA_SERVER || path.join(LLAMA_CACHE, 'bin', 'llama-server');
const MODEL_FILE = process.env.FLEETGATE_LLAMA_MODEL || path.join(LLAMA_CACHE, 'models', 'tiny-qwen2.gguf');
const MAKE_MODEL = path.join(REPO_ROOT, 'scripts', 'llama', 'make_tiny_model.py');
const MODEL = 'tiny-qwen2';
const SLOTS = 2;
const BLOCK_TOKENS = 32; // the gateway's 128-byte prompt block at 4 bytes per token

function whyNotRunnable() {
  if (process.env.FLEETGATE_SKIP_LLAMA === '1') {
    return 'FLEETGATE_SKIP_LLAMA=1';
  }
  if (!fs.existsSync(LLAMA_SERVER)) {
    return `llama.cpp's llama-server is not built (${LLAMA_SERVER} missing): run scripts/llama/build.sh`;
  }
  if (!fs.existsSync(MODEL_FILE)) {
    const r = spawnSync(MAKE_MODEL, ['--out', MODEL_FILE], { encoding: 'utf8', timeout: 120000 });
    if (r.status !== 0 || !fs.existsSync(MODEL_FILE)) {
      return `the tiny model ${MODEL_FILE} is missing and could not be made`;
    }
  }
  if (!fs.existsSync(AGENT_BIN)) {
    return `fleetgate-agent not found at ${AGENT_BIN}`;
  }
  return null;
}

const skipReason = whyNotRunnable();

// ---------------------------------------------------------------------------------------------
// The prompts

const WORDS = [' the', ' and', ' for', ' was', ' you', ' not', ' are', ' but', ' all', ' can',
  ' one', ' has', ' had', ' her', ' his', ' our', ' out', ' new', ' now', ' way', ' who', ' may',
  ' day', ' get', ' use', ' man', ' see', ' two', ' how', ' its'];

function words(count, seed) {
  let s = seed >>> 0;
  let out = '';
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out += WORDS[s % WORDS.length];
  }
  return out;
}

// Three instruction prefixes of 400 tokens (each starting with its own word, so they share
// nothing) and cases of 100.
const PREFIX = [1, 2, 3].map((k) => WORDS[k] + words(399, 1000 + k));
const CASE = (n) => words(100, 5000 + n);

// Each step: the prompt, and what llama.cpp's rules make of it (a check that the sequence
// exercises what it claims, on both sides). With a host cache, steps 6 and 7 find their
// prefix there.
const STEPS = [
  { prompt: PREFIX[0] + CASE(1), why: 'empty phone' },
  { prompt: PREFIX[1] + CASE(2), why: 'the other slot (LRU)' },
  { prompt: PREFIX[0] + CASE(3), why: 'the slot holding prefix 0 (similarity)', cached: true },
  { prompt: PREFIX[1] + CASE(4), why: 'the slot holding prefix 1 (similarity)', cached: true },
  { prompt: PREFIX[2] + CASE(5), why: 'a new prefix: LRU displaces prefix 0' },
  { prompt: PREFIX[0] + CASE(6), why: 'prefix 0 again: LRU displaces prefix 1', cachedWithHost: true },
  { prompt: PREFIX[1] + CASE(7), why: 'prefix 1 again: LRU displaces prefix 2', cachedWithHost: true },
  { prompt: PREFIX[0] + CASE(8), why: 'prefix 0 is in a slot', cached: true },
];

async function complete(base, prompt) {
  const res = await request(`${base}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 4, temperature: 0 }),
    timeoutMs: 60000,
  });
  assert.equal(res.status, 200, res.text);
  return {
    prompt: res.json.usage.prompt_tokens,
    cached: res.json.usage.prompt_tokens_details?.cached_tokens ?? 0,
    cache_n: res.json.timings?.cache_n,
  };
}

async function startLlama(cacheRamMiB) {
  const port = await freePort();
  const proc = spawn(
    LLAMA_SERVER,
    [
      '--model', MODEL_FILE, '--host', '127.0.0.1', '--port', String(port), '--alias', MODEL,
      '--parallel', String(SLOTS), '--ctx-size', String(SLOTS * 1024), '--threads', '1',
      '--threads-batch', '1', '--cache-ram', String(cacheRamMiB), '--no-webui',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let output = '';
  proc.stderr.on('data', (d) => {
    output = (output + d).slice(-4000);
  });
  const base = `http://127.0.0.1:${port}`;
  await eventually(async () => (await request(`${base}/health`, { timeoutMs: 2000 }).catch(() => ({}))).status === 200, {
    timeoutMs: 60000,
    everyMs: 50,
    what: `llama-server on ${port} ready`,
  }).catch((e) => {
    proc.kill('SIGKILL');
    e.message += `\n${output}`;
    throw e;
  });
  return { proc, base, output: () => output };
}

function stopProc(proc) {
  if (proc && proc.exitCode === null && proc.signalCode === null) {
    proc.kill('SIGKILL');
  }
}

for (const host of [false, true]) {
  describe(`the simulator's cache follows llama-server's (${host ? 'with' : 'without'} a host prompt cache)`, { skip: skipReason ?? false }, () => {
    let llama;
    let sim;
    before(async () => {
      // --cache-ram 0 turns llama-server's host cache off; 64 MiB holds every prompt here, as
      // the simulator's 100,000 tokens do.
      llama = await startLlama(host ? 64 : 0);
      sim = await startAgent([
        '--listen', '127.0.0.1:0', '--model', MODEL, '--profile', 'fast-test', '--slots', String(SLOTS),
        '--time-scale', '100', '--slot-prompt-similarity', '0.1',
        '--host-cache-tokens', host ? '100000' : '0',
      ]);
    });
    after(() => {
      stopProc(llama?.proc);
      stopAgent(sim);
    });

    test('cached tokens agree request by request', async (t) => {
      for (const [i, step] of STEPS.entries()) {
        const real = await complete(llama.base, step.prompt);
        const simulated = await complete(sim.base, step.prompt);
        t.diagnostic(
          `step ${i + 1} (${step.why}): llama-server ${real.cached}/${real.prompt} cached, ` +
            `sim ${simulated.cached}/${simulated.prompt}`,
        );
        // The prompts tokenize alike (within a few template tokens).
        assert.ok(Math.abs(real.prompt - simulated.prompt) <= 4, `step ${i + 1}: prompt tokens ${real.prompt} vs ${simulated.prompt}`);
        assert.equal(real.cache_n, real.cached, 'llama-server: timings.cache_n = cached_tokens');
        assert.equal(simulated.cache_n, simulated.cached, 'sim: timings.cache_n = cached_tokens');
        assert.ok(
          Math.abs(real.cached - simulated.cached) <= BLOCK_TOKENS,
          `step ${i + 1} (${step.why}): llama-server cached ${real.cached}, the sim ${simulated.cached}`,
        );
        const expectCached = step.cached || (host && step.cachedWithHost);
        for (const [who, r] of [['llama-server', real], ['sim', simulated]]) {
          if (expectCached) {
            assert.ok(r.cached >= 350, `step ${i + 1} (${step.why}): ${who} should reuse the prefix, cached ${r.cached}`);
          } else {
            assert.ok(r.cached < 50, `step ${i + 1} (${step.why}): ${who} should reuse nothing, cached ${r.cached}`);
          }
        }
      }
    });
  });
}

// The gateway's belief, as its metrics say it: answers compared, blocks predicted and reported.
async function cacheTotals(gw) {
  const text = await gw.metrics();
  return {
    reports: metricValue(text, 'fleetgate_prompt_cache_reports_total'),
    predicted: metricValue(text, 'fleetgate_prompt_cache_predicted_blocks_total'),
    reported: metricValue(text, 'fleetgate_prompt_cache_reported_blocks_total'),
  };
}

describe("the gateway's prompt-cache model follows llama-server's", { skip: skipReason ?? false }, () => {
  let llama;
  let gw;
  before(async () => {
    llama = await startLlama(0);
    gw = await startGateway({
      routing: { policy: 'expected_finish', slot_prompt_similarity: 0.1 },
      models: [{ name: MODEL, endpoints: [{ url: llama.base, slots: SLOTS }] }],
      upstream: { first_byte_timeout: '60s', idle_timeout: '60s' },
    });
    await eventually(
      async () => {
        const res = await request(`${gw.adminUrl}/admin/v1/replicas`);
        return res.status === 200 && res.json.replicas.some((r) => r.state === 'healthy');
      },
      { timeoutMs: 30000, everyMs: 25, what: 'the llama-server replica healthy at the gateway' },
    );
  });
  after(async () => {
    await stopChecked(gw);
    stopProc(llama?.proc);
  });

  test('what the gateway expects cached is what llama-server reports, request by request', async (t) => {
    let predictedCached = 0;
    for (const [i, step] of STEPS.entries()) {
      const before = await cacheTotals(gw);
      const real = await complete(gw.publicUrl, step.prompt);
      // The answer's report reaches the scheduler as the exchange ends, just after the client got it.
      let after;
      await eventually(async () => (after = await cacheTotals(gw)).reports === before.reports + 1, {
        timeoutMs: 10000,
        what: `step ${i + 1}: the gateway compared the answer's cached tokens`,
      });
      const predicted = after.predicted - before.predicted;
      const reported = after.reported - before.reported;
      t.diagnostic(
        `step ${i + 1} (${step.why}): llama-server ${real.cached}/${real.prompt} tokens cached = ` +
          `${reported} blocks; the gateway expected ${predicted} blocks`,
      );
      assert.ok(
        Math.abs(predicted - reported) <= 1,
        `step ${i + 1} (${step.why}): the gateway expected ${predicted} blocks cached, llama-server reported ${reported}`,
      );
      if (step.cached) {
        assert.ok(predicted >= 10, `step ${i + 1} (${step.why}): the gateway should expect the prefix cached`);
        predictedCached += 1;
      }
    }
    assert.ok(predictedCached >= 3, 'the sequence has requests the gateway expects cached');
    const misses = metricValue(await gw.metrics(), 'fleetgate_prompt_cache_mispredictions_total', { direction: 'under' });
    assert.equal(misses, 0, 'no answer reused less than half of what the gateway expected');
  });
});
