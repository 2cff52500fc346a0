// fleetgate-agent with the sim engine, as a real process on 127.0.0.1: OpenAI response shapes,
// streaming, admission (503 on slot+1), disconnects freeing slots, simulated timing, the per-slot
// prompt cache, and the SIGTERM drain.
//
// Every check waits for an event or polls a condition with a generous deadline: none sleeps and
// counts, none asserts that something took less than N ms (the machine has 2 busy cores). Where
// "at once" matters, the other side is made to last far longer than any hiccup, and the order of
// events is asserted instead. The simulator's timing against its profile is checked here only
// as a lower bound (the sim is never faster than its plan); the exact figures are unit tests of
// the pure model (tests/replica-agent/sim_model_test.cpp, SimTiming*).
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

// Generous: a deadline only says when to give up, and a loaded machine must not trip it.
const DEADLINE_MS = 10_000;

// promise, or a rejection naming what did not happen within timeoutMs.
async function withDeadline(promise, timeoutMs, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
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
// Timer and clock rounding between the agent and this process (both monotonic, sub-millisecond).
const ROUNDING_MS = 1;

// The agent's "request" log line of one request (the agent keeps a client's X-Request-Id).
function requestLog(agent, requestId) {
  return agent.logs.find((l) => l.msg === 'request' && l.request_id === requestId);
}

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
    // What the gateway's router seeds from: fast-test's 20000 / 200 tok/s (time scale 1), no
    // host prompt cache, the engine started once.
    assert.equal(h.prefill_tps, 20000);
    assert.equal(h.decode_tps, 200);
    assert.equal(h.host_prompt_cache_tokens, 0);
    assert.equal(h.engine_starts, 1);
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

  test('stream: one token per chunk, finish chunk, usage chunk with timings, [DONE]', async () => {
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
    // llama-server puts the timings on the last chunk: with include_usage, the usage chunk.
    assert.ok(!('timings' in finish));
    const usage = chunks[18];
    assert.equal(usage.timings.predicted_n, 16);
    assert.equal(usage.timings.cache_n, usage.usage.prompt_tokens_details.cached_tokens);
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

  test('bodies over 64 KiB (examined off the io thread): answered, prompt read, refusals the same', async () => {
    // 100,000 characters of prompt: 25,000 tokens, 1.25 s of prefill at fast-test's 20,000 tok/s.
    const content = 'Refund 77 from a new device. '.repeat(3449).slice(0, 100_000);
    let res = await post(agent, '/v1/chat/completions', chatBody(content, { max_tokens: 2 }));
    assert.equal(res.status, 200);
    let body = await res.json();
    assert.equal(body.usage.prompt_tokens, tokensFor(content.length));
    assert.equal(body.usage.completion_tokens, 2);

    res = await post(agent, '/v1/chat/completions', chatBody(content, { model: 'other-model' }));
    assert.equal(res.status, 404);
    assert.equal((await res.json()).error.code, 'model_not_found');
    res = await post(agent, '/v1/chat/completions', { model: MODEL, messages: content });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.param, 'messages');
    res = await post(agent, '/v1/chat/completions', `{"model":"${MODEL}","messages":[{"content":"${content}`);
    assert.equal(res.status, 400);
    assert.equal((await res.json()).error.code, 'invalid_json');
    assert.equal((await health(agent)).slots_idle, 1);
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

describe('admission (0.8b profile, 4 slots, time_scale 0.1)', () => {
  let agent;
  before(async () => {
    // Ten times slower than the phone: each answer takes ~14 s, so the slots stay busy for as
    // long as the test needs them; the test ends them itself.
    agent = await startAgent(['--profile', P08B.name, '--time-scale', '0.1']);
  });
  after(() => stopAgent(agent));

  test('the slot+1th request gets 503 with Retry-After while every slot is still busy', async () => {
    const h = await health(agent);
    assert.equal(h.slots_total, P08B.slots);
    const controllers = [];
    const heads = [];
    for (let i = 0; i < P08B.slots; ++i) {
      const controller = new AbortController();
      controllers.push(controller);
      const body = chatBody(`guard message ${i}`, { stream: true });
      heads.push(post(agent, '/v1/chat/completions', body, { signal: controller.signal }));
    }
    await waitFor(async () => (await health(agent)).slots_idle === 0, DEADLINE_MS, 'all slots busy');
    const res = await post(agent, '/v1/chat/completions', chatBody('one too many'));
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '1');
    const body = await res.json();
    assert.equal(body.error.type, 'server_error');
    assert.equal(body.error.code, 'slots_busy');
    // Refused without waiting for a slot: the four answers (~14 s each) are all still running.
    assert.equal((await health(agent)).slots_idle, 0, 'no slot freed before the 503');
    for (const r of await Promise.all(heads)) {
      assert.equal(r.status, 200);
    }
    for (const controller of controllers) {
      controller.abort();
    }
    await waitFor(async () => (await health(agent)).slots_idle === P08B.slots, DEADLINE_MS, 'slots freed');
  });
});

describe('disconnects (9b profile, time_scale 0.2)', () => {
  let agent;
  before(async () => {
    // Five times slower than the phone: 0.54 s per token and 13.9 s of prefill for 100 prompt
    // tokens, so an answer never ends by itself before the client leaves.
    agent = await startAgent(['--profile', P9B.name, '--time-scale', '0.2']);
  });
  after(() => stopAgent(agent));

  test('a client gone mid-stream frees its slot', async () => {
    const controller = new AbortController();
    const t0 = performance.now();
    const res = await post(agent, '/v1/chat/completions', chatBody('hi', { stream: true }), {
      signal: controller.signal,
      headers: { 'content-type': 'application/json', 'x-request-id': 'gone-mid-stream' },
    });
    // Leave after the third token: 13 tokens (~7 s) of the answer are still to come.
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
    await waitFor(async () => (await health(agent)).slots_idle === 1, DEADLINE_MS, 'slot freed');
    // Freed because the client left, not because the answer ended.
    await waitFor(() => requestLog(agent, 'gone-mid-stream'), DEADLINE_MS, 'the request log line');
    assert.equal(requestLog(agent, 'gone-mid-stream').outcome, 'client_gone');
    // The slot is usable again.
    const again = await post(agent, '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 1 });
    assert.equal(again.status, 200);
    await again.json();
  });

  test('a client gone during prefill frees its slot, and the prefill never completes', async () => {
    // 400 characters = 100 tokens: 100 / 35.9 / 0.2 = 13.9 s of prefill.
    const prompt = 'p'.repeat(400);
    const leaveDuringPrefill = async (requestId) => {
      const controller = new AbortController();
      const pending = post(agent, '/v1/chat/completions', chatBody(prompt, { stream: true }), {
        signal: controller.signal,
        headers: { 'content-type': 'application/json', 'x-request-id': requestId },
      }).catch(() => null);
      await waitFor(async () => (await health(agent)).slots_idle === 0, DEADLINE_MS, 'slot taken');
      const res = await pending;
      if (res) {
        res.body.cancel().catch(() => {});
      }
      controller.abort();
      await waitFor(async () => (await health(agent)).slots_idle === 1, DEADLINE_MS, 'slot freed');
      await waitFor(() => requestLog(agent, requestId), DEADLINE_MS, 'the request log line');
      return requestLog(agent, requestId);
    };
    const first = await leaveDuringPrefill('gone-in-prefill-1');
    assert.equal(first.outcome, 'client_gone');
    // A slot's cache takes the prompt only once its prefill is done: the same prompt again finds
    // nothing cached, so the first one stopped during its prefill.
    const second = await leaveDuringPrefill('gone-in-prefill-2');
    assert.equal(second.outcome, 'client_gone');
    assert.equal(second.cached_tokens, 0);
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

  // Lower bounds only: the agent waits on absolute deadlines (prefill end, then one interval per
  // token), so no token can come before its planned time, however loaded the machine; an upper
  // bound would measure the machine instead. The exact plan for these two requests is unit-tested
  // on the pure model (SimTiming.StreamOfTheTimingTest, SimTiming.SharedPrefixOfTheTimingTest).
  test('streaming is never faster than the profile', async (t) => {
    // 1,400 characters = 350 tokens: prefill 350 / 35.9 / 10 = 0.975 s; then 15 intervals of
    // 1 / 9.3 / 10 s = 10.75 ms: about 1.14 s in all.
    const content = 'a'.repeat(1400);
    const prefill = tokensFor(content.length) / P9B.prefillTps / timeScale;
    const interval = 1 / P9B.decodeTps / timeScale;
    const expectedFirst = prefill * 1000;
    const { firstToken, total, tokenTimes, finish } = await timedStream(content);
    assert.equal(tokenTimes.length, P9B.answerTokens);
    const decodeMs = (total - firstToken) / (P9B.answerTokens - 1);
    t.diagnostic(
      `first token ${firstToken.toFixed(0)} ms (plan ${expectedFirst.toFixed(0)}), ` +
        `token interval ${decodeMs.toFixed(1)} ms (plan ${(interval * 1000).toFixed(1)})`,
    );
    tokenTimes.forEach((ms, i) => {
      const planned = expectedFirst + i * interval * 1000;
      assert.ok(ms >= planned - ROUNDING_MS, `token ${i} after ${ms.toFixed(1)} ms, plan ${planned.toFixed(1)}`);
    });
    // The agent's own timings: the plan's token counts, and never shorter than the plan.
    assert.equal(finish.timings.prompt_n, 350);
    assert.equal(finish.timings.cache_n, 0);
    assert.equal(finish.timings.predicted_n, P9B.answerTokens);
    assert.ok(finish.timings.prompt_ms >= expectedFirst - ROUNDING_MS, JSON.stringify(finish.timings));
    assert.ok(
      finish.timings.predicted_ms >= (P9B.answerTokens - 1) * interval * 1000 - ROUNDING_MS,
      JSON.stringify(finish.timings),
    );
  });

  test('a second request sharing the prefix has it cached, and pays only for the rest', async (t) => {
    // 2,000 characters = 500 tokens, all cached for the follow-up, which then reads 11 more.
    const prefix = 'b'.repeat(2000);
    const followUp = prefix + '\nZZ follow-up question about the same case';
    const cachedTokens = prefix.length / 4;
    const first = await timedStream(prefix);
    const second = await timedStream(followUp);
    assert.equal(first.finish.timings.cache_n, 0);
    assert.equal(second.finish.timings.cache_n, cachedTokens);
    assert.equal(second.finish.timings.prompt_n, tokensFor(followUp.length) - cachedTokens);
    const uncachedMs = ((tokensFor(followUp.length) - cachedTokens) / P9B.prefillTps / timeScale) * 1000;
    t.diagnostic(
      `first token: ${first.firstToken.toFixed(0)} ms, follow-up ${second.firstToken.toFixed(0)} ms ` +
        `(plan for the uncached part ${uncachedMs.toFixed(1)} ms)`,
    );
    assert.ok(second.firstToken >= uncachedMs - ROUNDING_MS);
    assert.ok(second.finish.timings.prompt_ms >= uncachedMs - ROUNDING_MS);
  });
});

describe('SIGTERM drain', () => {
  let agent;
  before(async () => {
    agent = await startAgent(['--profile', P9B.name, '--time-scale', '1']);
  });
  after(() => stopAgent(agent));

  test('in-flight requests complete, new ones get 503, exit code 0', async () => {
    // 400 characters: 100 / 35.9 = 2.8 s of prefill, then 16 tokens at 9.3 tok/s (1.6 s): the
    // signal, the log line and the refused request all come well within it.
    const t0 = performance.now();
    const inFlight = post(
      agent,
      '/v1/chat/completions',
      chatBody('c'.repeat(400), { stream: true }),
    ).then((res) => readEvents(res, t0));
    await waitFor(async () => (await health(agent)).slots_idle === 0, DEADLINE_MS, 'slot taken');
    process.kill(agent.proc.pid, 'SIGTERM');
    await waitFor(
      () => agent.logs.some((l) => l.msg.startsWith('shutting down')),
      DEADLINE_MS,
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
    // The drain ends with the last request; the deadline is only there to fail rather than hang.
    const [code] = await withDeadline(agent.exited, DEADLINE_MS, 'the exit');
    assert.equal(code, 0);
  });
});
