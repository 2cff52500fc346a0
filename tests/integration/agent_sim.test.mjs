// fleetgate-agent with the sim engine, as a real process on 127.0.0.1: OpenAI response shapes,
// streaming, admission (503 on slot+1), disconnects freeing slots, simulated timing, the per-slot
// prompt cache, and the SIGTERM drain.
//
// Binary: $FLEETGATE_AGENT_BIN, default build/bin/fleetgate-agent (relative to the repository).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startAgent as launchAgent, stopAgent } from './lib/agent.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN ?? path.join(repoRoot, 'build/bin/fleetgate-agent');

const MODEL = 'qwen3.5-test';

const startAgent = (args) => launchAgent(['--listen', '127.0.0.1:0', '--model', MODEL, ...args]);
// The profile table (replica-agent/engines/sim_model.cpp, docs/simulator.md) as the tests use it.
const P9B = {
  name: 'qwen3.5-9b/snapdragon-8-elite',
  prefillTps: 7000 / 195,
  decodeTps: 9.3,
  answerTokens: 16,
};
const P08B = { name: 'qwen3.5-0.8b/snapdragon-8-elite', slots: 4 };


function chatBody(content, extra = {}) {
  return { model: MODEL, messages: [{ role: 'user', content }], ...extra };
}

function post(agent, route, body, init = {}) {
  return fetch(agent.base + route, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  });
}

async function health(agent) {
  const res = await fetch(agent.base + '/health');
  return res.json();
}

// Reads an SSE response; calls onEvent(data, elapsedMs) for each "data:" event.
async function readEvents(res, t0, onEvent = () => {}) {
  const events = [];
  const decoder = new TextDecoder();
  let pending = '';
  // preventCancel: stopping early leaves the connection open; the caller decides when to drop it.
  for await (const bytes of res.body.values({ preventCancel: true })) {
    pending += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = pending.indexOf('\n\n')) >= 0) {
      const block = pending.slice(0, end);
      pending = pending.slice(end + 2);
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      if (data) {
        const event = { data, ms: performance.now() - t0 };
        events.push(event);
        if (onEvent(event) === 'stop') {
          return events;
        }
      }
    }
  }
  return events;
}

async function waitFor(predicate, timeoutMs, what) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await predicate()) {
      return performance.now();
    }
    if (performance.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

const tokensFor = (chars) => Math.ceil(chars / 4);
const within = (actual, expected, fraction) => Math.abs(actual - expected) <= expected * fraction;

// ---------------------------------------------------------------------------------------------

describe('command line', () => {
  test('bad flags exit 2 naming the flag', () => {
    const cases = [
      [['--model', MODEL, '--slots', 'zero'], '--slots'],
      [['--model', MODEL, '--profile', 'no-such-phone'], '--profile'],
      [['--model', MODEL, '--time-scale', '0'], '--time-scale'],
      [['--model', MODEL, '--listen', 'nowhere'], '--listen'],
      [['--model', MODEL, '--fail-rate', '1.5'], '--fail-rate'],
      [['--model', MODEL, '--frobnicate'], '--frobnicate'],
      [[], '--model'],
    ];
    for (const [args, flag] of cases) {
      const run = spawnSync(AGENT_BIN, args, { encoding: 'utf8', timeout: 5000 });
      assert.equal(run.status, 2, `${args.join(' ')}: exit code`);
      assert.match(run.stderr, new RegExp(flag.replace(/-/g, '\\-')), `${args.join(' ')}: message`);
    }
    const version = spawnSync(AGENT_BIN, ['--version'], { encoding: 'utf8' });
    assert.equal(version.status, 0);
    assert.match(version.stdout, /^fleetgate-agent \d+\.\d+\.\d+/);
  });
});

describe('OpenAI responses (fast-test profile)', () => {
  let agent;
  before(async () => {
    agent = await startAgent(['--profile', 'fast-test', '--seed', '7']);
  });
  after(() => stopAgent(agent));

  test('health and models', async () => {
    const h = await health(agent);
    assert.equal(h.status, 'ok');
    assert.equal(h.model, MODEL);
    assert.equal(h.engine, 'sim');
    assert.equal(h.profile, 'fast-test');
    assert.equal(h.slots_total, 1);
    assert.equal(h.slots_idle, 1);
    assert.equal(typeof h.agent_version, 'string');
    // Device facts from /proc (this machine's).
    assert.ok(h.device.ram_bytes > 0, JSON.stringify(h.device));
    assert.ok(h.device.cpu_cores > 0, JSON.stringify(h.device));
    assert.equal(typeof h.device.cpu_model, 'string');
    const models = await (await fetch(agent.base + '/v1/models')).json();
    assert.equal(models.object, 'list');
    assert.deepEqual(
      models.data.map((m) => m.id),
      [MODEL],
    );
  });

  test('non-stream chat: shape, usage and timings', async () => {
    const content = 'Transaction 1234: card-not-present, new device, 3 refunds this week.';
    const res = await post(agent, '/v1/chat/completions', chatBody(content));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^application\/json/);
    const body = await res.json();
    assert.match(body.id, /^chatcmpl-[A-Za-z0-9]{24}$/);
    assert.equal(body.object, 'chat.completion');
    assert.ok(Number.isInteger(body.created) && Math.abs(body.created - Date.now() / 1000) < 60);
    assert.equal(body.model, MODEL);
    assert.equal(body.choices.length, 1);
    const [choice] = body.choices;
    assert.equal(choice.index, 0);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(choice.message.content.length > 0);
    assert.equal(choice.finish_reason, 'stop');
    assert.equal(body.usage.prompt_tokens, tokensFor(content.length));
    assert.equal(body.usage.completion_tokens, 16);
    assert.equal(body.usage.total_tokens, body.usage.prompt_tokens + 16);
    const t = body.timings;
    for (const key of [
      'prompt_n',
      'cache_n',
      'prompt_ms',
      'prompt_per_second',
      'predicted_n',
      'predicted_ms',
      'predicted_per_second',
    ]) {
      assert.equal(typeof t[key], 'number', `timings.${key}`);
    }
    assert.equal(t.prompt_n + t.cache_n, body.usage.prompt_tokens);
    assert.equal(t.predicted_n, 16);

    // Same prompt, same seed: same answer.
    const again = await (await post(agent, '/v1/chat/completions', chatBody(content))).json();
    assert.equal(again.choices[0].message.content, choice.message.content);
  });

  test('max_tokens caps the answer with finish_reason "length"', async () => {
    const body = await (
      await post(agent, '/v1/chat/completions', chatBody('short', { max_tokens: 3 }))
    ).json();
    assert.equal(body.choices[0].finish_reason, 'length');
    assert.equal(body.usage.completion_tokens, 3);
  });

  test('non-stream completions', async () => {
    const res = await post(agent, '/v1/completions', { model: MODEL, prompt: 'RISK_LEVEL:' });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.match(body.id, /^cmpl-/);
    assert.equal(body.object, 'text_completion');
    assert.equal(typeof body.choices[0].text, 'string');
    assert.equal(body.choices[0].finish_reason, 'stop');
    assert.equal(body.usage.prompt_tokens, tokensFor('RISK_LEVEL:'.length));
    assert.equal(body.usage.completion_tokens, 16);
  });

  test('stream: one token per chunk, finish chunk with timings, usage chunk, [DONE]', async () => {
    const content = 'Is this chargeback legitimate? Customer says the parcel never arrived.';
    const res = await post(
      agent,
      '/v1/chat/completions',
      chatBody(content, { stream: true, stream_options: { include_usage: true } }),
    );
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const events = await readEvents(res, performance.now());
    assert.equal(events.at(-1).data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
    const ids = new Set(chunks.map((c) => c.id));
    assert.equal(ids.size, 1);
    assert.match([...ids][0], /^chatcmpl-/);
    for (const c of chunks) {
      assert.equal(c.object, 'chat.completion.chunk');
      assert.equal(c.model, MODEL);
    }
    // role chunk, 16 token chunks, finish chunk, usage chunk
    assert.equal(chunks.length, 1 + 16 + 1 + 1);
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    const tokens = chunks.slice(1, 17);
    for (const c of tokens) {
      assert.equal(c.choices.length, 1);
      assert.equal(typeof c.choices[0].delta.content, 'string');
      assert.ok(c.choices[0].delta.content.length > 0);
      assert.equal(c.choices[0].finish_reason, null);
      assert.equal(c.usage, null);
    }
    const finish = chunks[17];
    assert.equal(finish.choices[0].finish_reason, 'stop');
    assert.deepEqual(finish.choices[0].delta, {});
    assert.equal(finish.timings.predicted_n, 16);
    const usage = chunks[18];
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.prompt_tokens, tokensFor(content.length));
    assert.equal(usage.usage.completion_tokens, 16);
    assert.equal(usage.usage.total_tokens, usage.usage.prompt_tokens + 16);

    // The streamed text equals the non-stream answer to the same prompt.
    const whole = await (await post(agent, '/v1/chat/completions', chatBody(content))).json();
    assert.equal(tokens.map((c) => c.choices[0].delta.content).join(''), whole.choices[0].message.content);
  });

  test('stream without include_usage has no usage chunk; completions stream', async () => {
    const res = await post(agent, '/v1/completions', {
      model: MODEL,
      prompt: 'abc',
      stream: true,
      max_tokens: 4,
    });
    const events = await readEvents(res, performance.now());
    assert.equal(events.at(-1).data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
    assert.equal(chunks.length, 4 + 1);
    for (const c of chunks) {
      assert.equal(c.object, 'text_completion');
      assert.ok(!('usage' in c));
    }
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
    assert.ok(chunks.at(-1).timings);
  });

  test('back-to-back requests on a one-slot phone never see 503', async () => {
    // The slot is freed before the last bytes are written, so the next request (sent as soon as
    // the previous answer is read) always finds it free.
    for (let i = 0; i < 20; ++i) {
      const res = await post(agent, '/v1/completions', {
        model: MODEL,
        prompt: `case ${i}`,
        max_tokens: 2,
        stream: i % 2 === 0,
      });
      assert.equal(res.status, 200, `request ${i}`);
      await res.text();
    }
  });

  test('bad input: 400, 404, 405, 415, never a crash', async () => {
    let res = await post(agent, '/v1/chat/completions', '{"model":');
    assert.equal(res.status, 400);
    let body = await res.json();
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.code, 'invalid_json');

    res = await post(agent, '/v1/chat/completions', { messages: [] });
    assert.equal(res.status, 400);
    await res.body.cancel();
    res = await post(agent, '/v1/chat/completions', { model: MODEL, messages: 'hi' });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.param, 'messages');
    res = await post(agent, '/v1/chat/completions', chatBody('hi', { model: 'other-model' }));
    assert.equal(res.status, 404);
    assert.equal((await res.json()).error.code, 'model_not_found');
    res = await fetch(agent.base + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: '{}',
    });
    assert.equal(res.status, 415);
    await res.body.cancel();
    res = await fetch(agent.base + '/v1/nothing-here');
    assert.equal(res.status, 404);
    assert.ok((await res.json()).error);
    res = await fetch(agent.base + '/v1/chat/completions');
    assert.equal(res.status, 405);
    assert.equal(res.headers.get('allow'), 'POST');
    await res.body.cancel();
    assert.equal((await health(agent)).status, 'ok');
  });
});

describe('admission (0.8b profile, 4 slots)', () => {
  let agent;
  before(async () => {
    agent = await startAgent(['--profile', P08B.name]);
  });
  after(() => stopAgent(agent));

  test('the slot+1th request gets 503 with Retry-After at once', async () => {
    const h = await health(agent);
    assert.equal(h.slots_total, P08B.slots);
    // Four short requests: ~1.3 s each with four slots decoding together.
    const running = [];
    for (let i = 0; i < P08B.slots; ++i) {
      running.push(post(agent, '/v1/chat/completions', chatBody(`guard message ${i}`)));
    }
    await waitFor(async () => (await health(agent)).slots_idle === 0, 1000, 'all slots busy');
    const t0 = performance.now();
    const res = await post(agent, '/v1/chat/completions', chatBody('one too many'));
    const elapsed = performance.now() - t0;
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '1');
    const body = await res.json();
    assert.equal(body.error.type, 'server_error');
    assert.equal(body.error.code, 'slots_busy');
    assert.ok(elapsed < 250, `503 took ${elapsed.toFixed(0)} ms`);
    for (const r of await Promise.all(running)) {
      assert.equal(r.status, 200);
      await r.json();
    }
    assert.equal((await health(agent)).slots_idle, P08B.slots);
  });
});

describe('disconnects (9b profile, time_scale 2)', () => {
  let agent;
  before(async () => {
    agent = await startAgent(['--profile', P9B.name, '--time-scale', '2']);
  });
  after(() => stopAgent(agent));

  test('a client gone mid-stream frees its slot within 1 s', async () => {
    const controller = new AbortController();
    const t0 = performance.now();
    const res = await post(agent, '/v1/chat/completions', chatBody('hi', { stream: true }), {
      signal: controller.signal,
    });
    // ~54 ms per token at time_scale 2: leave after the third token, mid-answer.
    let tokens = 0;
    await readEvents(res, t0, (e) => {
      const chunk = JSON.parse(e.data);
      if (chunk.choices[0]?.delta?.content) {
        tokens += 1;
      }
      return tokens === 3 ? 'stop' : undefined;
    });
    assert.equal((await health(agent)).slots_idle, 0);
    controller.abort();
    const tAbort = performance.now();
    const tFree = await waitFor(async () => (await health(agent)).slots_idle === 1, 1000, 'slot freed');
    assert.ok(tFree - tAbort < 1000);
    // The slot is usable again.
    const again = await post(agent, '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 1 });
    assert.equal(again.status, 200);
    await again.json();
  });

  test('a client gone during prefill frees its slot at once', async () => {
    // 400 characters = 100 tokens: 100 / 35.9 / 2 = 1.39 s of prefill.
    const controller = new AbortController();
    const pending = post(
      agent,
      '/v1/chat/completions',
      chatBody('p'.repeat(400), { stream: true }),
      { signal: controller.signal },
    ).catch(() => null);
    await waitFor(async () => (await health(agent)).slots_idle === 0, 1000, 'slot taken');
    const res = await pending;
    if (res) {
      res.body.cancel().catch(() => {});
    }
    controller.abort();
    const tAbort = performance.now();
    const tFree = await waitFor(async () => (await health(agent)).slots_idle === 1, 1000, 'slot freed');
    // Well before the prefill would have ended.
    assert.ok(tFree - tAbort < 500, `slot freed ${(tFree - tAbort).toFixed(0)} ms after abort`);
  });
});

describe('simulated timing (9b profile, time_scale 10)', () => {
  const timeScale = 10;
  let agent;
  before(async () => {
    agent = await startAgent(['--profile', P9B.name, '--time-scale', String(timeScale)]);
  });
  after(() => stopAgent(agent));

  async function timedStream(content) {
    const t0 = performance.now();
    const res = await post(agent, '/v1/chat/completions', chatBody(content, { stream: true }));
    assert.equal(res.status, 200);
    const tokenTimes = [];
    let finish;
    await readEvents(res, t0, (e) => {
      if (e.data === '[DONE]') {
        return undefined;
      }
      const chunk = JSON.parse(e.data);
      if (chunk.choices[0]?.delta?.content) {
        tokenTimes.push(e.ms);
      }
      if (chunk.choices[0]?.finish_reason) {
        finish = chunk;
      }
      return undefined;
    });
    return { firstToken: tokenTimes[0], total: tokenTimes.at(-1), tokenTimes, finish };
  }

  test('streaming timing is within 20% of the profile', async (t) => {
    // 1,400 characters = 350 tokens: prefill 350 / 35.9 / 10 = 0.975 s; then 15 intervals of
    // 1 / 9.3 / 10 s = 0.161 s: about 1.14 s in all.
    const content = 'a'.repeat(1400);
    const prefill = tokensFor(content.length) / P9B.prefillTps / timeScale;
    const interval = 1 / P9B.decodeTps / timeScale;
    const expectedFirst = prefill * 1000;
    const expectedTotal = (prefill + (P9B.answerTokens - 1) * interval) * 1000;
    const { firstToken, total, tokenTimes, finish } = await timedStream(content);
    assert.equal(tokenTimes.length, P9B.answerTokens);
    const decodeMs = (total - firstToken) / (P9B.answerTokens - 1);
    const report = `first token ${firstToken.toFixed(0)} ms (expected ${expectedFirst.toFixed(0)}), ` +
      `total ${total.toFixed(0)} ms (expected ${expectedTotal.toFixed(0)}), ` +
      `token interval ${decodeMs.toFixed(1)} ms (expected ${(interval * 1000).toFixed(1)})`;
    t.diagnostic(report);
    assert.ok(within(firstToken, expectedFirst, 0.2), report);
    assert.ok(within(total, expectedTotal, 0.2), report);
    assert.ok(within(decodeMs, interval * 1000, 0.2), report);
    // The agent's own timings agree.
    assert.equal(finish.timings.prompt_n, 350);
    assert.equal(finish.timings.cache_n, 0);
    assert.ok(within(finish.timings.prompt_ms, expectedFirst, 0.2));
    assert.ok(within(finish.timings.predicted_ms, (P9B.answerTokens - 1) * interval * 1000, 0.2));
  });

  test('a second request sharing the prefix is faster by the cached prefill', async (t) => {
    // 2,000 characters = 500 tokens, all cached for the follow-up: saves 500 / 35.9 / 10 = 1.39 s.
    const prefix = 'b'.repeat(2000);
    const followUp = prefix + '\nZZ follow-up question about the same case';
    const cachedTokens = prefix.length / 4;
    const expectedSavingMs = (cachedTokens / P9B.prefillTps / timeScale) * 1000;
    const first = await timedStream(prefix);
    const second = await timedStream(followUp);
    assert.equal(second.finish.timings.cache_n, cachedTokens);
    assert.equal(second.finish.timings.prompt_n, tokensFor(followUp.length) - cachedTokens);
    // Compare with what the follow-up would cost uncached.
    const uncachedFirstMs = (tokensFor(followUp.length) / P9B.prefillTps / timeScale) * 1000;
    const saving = uncachedFirstMs - second.firstToken;
    const report = `first ${first.firstToken.toFixed(0)} ms, follow-up ${second.firstToken.toFixed(0)} ms, ` +
      `saving ${saving.toFixed(0)} ms (expected ${expectedSavingMs.toFixed(0)})`;
    t.diagnostic(report);
    assert.ok(within(saving, expectedSavingMs, 0.2), report);
    assert.ok(first.firstToken - second.firstToken > 0.8 * expectedSavingMs, report);
  });
});

describe('SIGTERM drain', () => {
  let agent;
  before(async () => {
    agent = await startAgent(['--profile', P9B.name, '--time-scale', '10']);
  });
  after(() => stopAgent(agent));

  test('in-flight requests complete, new ones get 503, exit code 0', async () => {
    // 1,000 characters: ~0.7 s prefill + 0.16 s decode at time_scale 10.
    const t0 = performance.now();
    const inFlight = post(
      agent,
      '/v1/chat/completions',
      chatBody('c'.repeat(1000), { stream: true }),
    ).then((res) => readEvents(res, t0));
    await waitFor(async () => (await health(agent)).slots_idle === 0, 1000, 'slot taken');
    process.kill(agent.proc.pid, 'SIGTERM');
    await waitFor(
      () => agent.logs.some((l) => l.msg.startsWith('shutting down')),
      1000,
      'shutdown log line',
    );
    const refused = await post(agent, '/v1/chat/completions', chatBody('late'));
    assert.equal(refused.status, 503);
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.equal((await refused.json()).error.code, 'shutting_down');

    const events = await inFlight;
    assert.equal(events.at(-1).data, '[DONE]');
    const contentChunks = events
      .slice(0, -1)
      .map((e) => JSON.parse(e.data))
      .filter((c) => c.choices[0]?.delta?.content);
    assert.equal(contentChunks.length, P9B.answerTokens);
    const [code] = await Promise.race([
      agent.exited,
      new Promise((_, reject) => setTimeout(() => reject(new Error('no exit in 3 s')), 3000)),
    ]);
    assert.equal(code, 0);
  });
});
