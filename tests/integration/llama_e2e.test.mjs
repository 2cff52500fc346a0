// Real inference end to end: the official `openai` client -> fleetgate -> 2 fleetgate-agents with
// the llama-server engine -> 2 real llama.cpp servers (each agent starts and supervises its own)
// running the tiny random-weight model of scripts/llama/make_tiny_model.py.
//
// Proves: streaming and not, usage, [DONE] and timings, slots taken from llama-server's /props
// (llama-server -> agent /health -> gateway), two agents sharing load; and with the real engine:
// llama-server killed mid-stream (SSE error event, engine restarted, replica unhealthy then
// healthy, later requests fine), client gone mid-stream (the llama.cpp slot is idle again within
// a second, checked on its /slots), a prompt larger than the context (a clear 400).
//
// Needs .cache/llama/bin/llama-server (scripts/llama/build.sh, about 10 minutes the first time)
// and the model (made here from the llama.cpp source tree when missing, ~15 s). Without them the
// whole file is SKIPPED with the reason, so the suite passes where llama.cpp was not built.
// FLEETGATE_LLAMA_REQUIRED=1 turns such a skip into a failure (for ./fleet once it built
// llama.cpp); FLEETGATE_SKIP_LLAMA=1 skips on purpose. Overrides: FLEETGATE_LLAMA_SERVER,
// FLEETGATE_LLAMA_MODEL, FLEETGATE_LLAMA_CACHE, FLEETGATE_AGENT_BIN, FLEETGATE_BIN. See docs/llama.md.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';

import { alive, freePort } from './lib/agent.mjs';
import {
  REPO_ROOT,
  eventually,
  makeTempDir,
  openStream,
  parseSse,
  removeDir,
  request,
  sleep,
  startGateway,
  stopChecked,
  toYaml,
} from './lib/gateway.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent');
const LLAMA_CACHE = process.env.FLEETGATE_LLAMA_CACHE || path.join(REPO_ROOT, '.cache', 'llama');
const LLAMA_SERVER = process.env.FLEETGATE_LLAMA_SERVER || path.join(LLAMA_CACHE, 'bin', 'llama-server');
const MODEL_FILE = process.env.FLEETGATE_LLAMA_MODEL || path.join(LLAMA_CACHE, 'models', 'tiny-qwen2.gguf');
const MAKE_MODEL = path.join(REPO_ROOT, 'scripts', 'llama', 'make_tiny_model.py');
const MODEL = 'tiny-qwen2';
const PARALLEL = 2; // llama-server --parallel: the slots the agent must find in /props
const CONTEXT = 2048; // llama-server -c (split over the slots)

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
    // The tiny model is made at test time from the llama.cpp source tree (deterministic, ~15 s).
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
  if (!`${help.stdout}${help.stderr}`.includes('llama-server')) {
    return `${AGENT_BIN} has no llama-server engine (its --help does not mention it)`;
  }
  return null;
}

const skipReason = whyNotRunnable();
if (skipReason && process.env.FLEETGATE_LLAMA_REQUIRED === '1' && process.env.FLEETGATE_SKIP_LLAMA !== '1') {
  throw new Error(`FLEETGATE_LLAMA_REQUIRED=1 but the real-engine test cannot run: ${skipReason}`);
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

// The llama-server command line of one agent's engine: one thread (two engines share this
// machine's cores with the gateway and the test), PARALLEL slots over CONTEXT tokens.
function llamaCommand(port) {
  return [
    LLAMA_SERVER,
    '--model', MODEL_FILE,
    '--host', '127.0.0.1',
    '--port', String(port),
    '--alias', MODEL, // answers name the model as clients do, not the file path
    '--parallel', String(PARALLEL),
    '--ctx-size', String(CONTEXT),
    '--threads', '1',
    '--threads-batch', '1',
    '--metrics',
    '--slots',
    '--no-webui',
  ];
}

// Starts a fleetgate-agent (llama-server engine) whose engine it starts itself; resolves once the
// agent's /health is 200 (llama-server loaded and its slots read from /props).
async function startLlamaAgent(name) {
  const enginePort = await freePort();
  const dir = makeTempDir(`fleetgate-llama-${name}-`);
  const configPath = path.join(dir, 'agent.yaml');
  fs.writeFileSync(configPath, toYaml({
    listen: '127.0.0.1:0',
    model: MODEL,
    engine: {
      kind: 'llama-server',
      url: `http://127.0.0.1:${enginePort}`,
      command: llamaCommand(enginePort), // a YAML list: paths with spaces are fine
    },
    drain_timeout: '2s',
    log: { level: 'info' },
  }));
  const proc = spawn(AGENT_BIN, ['--config', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  livePids.add(proc.pid);
  const agent = {
    name,
    proc,
    dir,
    enginePort,
    engineUrl: `http://127.0.0.1:${enginePort}`,
    logs: [],
    text: '', // everything the agent and its engine wrote (for failure messages)
    base: null,
    exited: new Promise((resolve) => proc.once('exit', (code, signal) => {
      livePids.delete(proc.pid);
      resolve({ code, signal });
    })),
    // pid of the engine the agent started last ("engine started" log line)
    enginePid() {
      return this.logs.filter((l) => l.msg === 'engine started').at(-1)?.pid;
    },
    waitForLog(predicate, { timeoutMs = 15000, what = 'a log line', fromIndex = 0 } = {}) {
      return eventually(() => this.logs.slice(fromIndex).some(predicate), { timeoutMs, everyMs: 10, what: `${name}: ${what}` })
        .catch((e) => {
          e.message += `\n--- ${name} output (tail) ---\n${this.text.slice(-3000)}`;
          throw e;
        })
        .then(() => this.logs.slice(fromIndex).find(predicate));
    },
    async health() {
      return request(`${this.base}/health`, { timeoutMs: 3000 });
    },
    async engineSlots() {
      const res = await request(`${this.engineUrl}/slots`, { timeoutMs: 3000 });
      assert.equal(res.status, 200, `llama-server /slots: ${res.status} ${res.text}`);
      return res.json;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 8000);
        await this.exited;
        clearTimeout(timer);
      }
      // The agent stops its engine on exit (and PR_SET_PDEATHSIG covers a killed agent); make sure.
      for (const l of this.logs.filter((x) => x.msg === 'engine started')) {
        await eventually(() => !alive(l.pid), { timeoutMs: 6000, what: `${name}: engine pid ${l.pid} gone` }).catch(() => {
          try {
            process.kill(l.pid, 'SIGKILL');
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
          if (entry.msg === 'engine started' && entry.pid) {
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
  try {
    const listening = await agent.waitForLog((l) => l.msg === 'listening' && l.listener === 'agent', { timeoutMs: 10000, what: 'listening' });
    agent.base = `http://${listening.address}`;
    await eventually(async () => (await agent.health()).status === 200, { timeoutMs: 60000, everyMs: 50, what: `${name}: /health 200 (llama-server loaded)` });
  } catch (e) {
    e.message += `\n--- ${name} output (tail) ---\n${agent.text.slice(-3000)}`;
    await agent.stop();
    throw e;
  }
  return agent;
}

async function adminReplicas(gw) {
  const res = await request(`${gw.adminUrl}/admin/v1/replicas`);
  assert.equal(res.status, 200, res.text);
  return res.json.replicas;
}

async function replicaOf(gw, agent) {
  return (await adminReplicas(gw)).find((r) => r.url === agent.base);
}

async function waitForReplica(gw, agent, predicate, what, timeoutMs = 20000) {
  let last;
  try {
    await eventually(async () => predicate((last = await replicaOf(gw, agent))), { timeoutMs, everyMs: 25, what });
  } catch (e) {
    e.message += `; last seen: ${JSON.stringify(last)}`;
    throw e;
  }
  return last;
}

async function agentRequests(agent) {
  const res = await request(`${agent.base}/metrics`);
  const m = /^fleetgate_agent_requests_total\{status="200"\}\s+(\S+)/m.exec(res.text);
  return m ? Number(m[1]) : 0;
}

const chat = (content, extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content }], ...extra });

// ---------------------------------------------------------------------------------------------

// Skipped: one skipped test with the reason (the summary then counts it as skipped).
const suite = skipReason
  ? (name) => test(name, { skip: skipReason }, () => {})
  : describe;

suite('real llama-server behind agents and the gateway (openai client)', () => {
  let OpenAI;
  let APIError;
  let agents = [];
  let gw;
  let client;

  before(async () => {
    try {
      ({ default: OpenAI, APIError } = await import('openai'));
    } catch (e) {
      throw new Error(`the openai npm package is not installed (${e.code ?? e.message}): run npm ci --prefix tests/integration`);
    }
    agents = await Promise.all([startLlamaAgent('phone-a'), startLlamaAgent('phone-b')]);
    gw = await startGateway({
      // Fast probes: a replica whose engine died is noticed within about a second.
      health: { interval: '400ms', timeout: '300ms', unhealthy_after: 1, healthy_after: 1, eject_after: 3 },
      // The model's slots are left at the default (1): the agents report llama-server's.
      models: [{ name: MODEL, endpoints: agents.map((a) => a.base) }],
      upstream: { first_byte_timeout: '30s', idle_timeout: '10s' },
    });
    client = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
    for (const a of agents) {
      await waitForReplica(gw, a, (r) => r?.state === 'healthy', `${a.name} healthy at the gateway`);
    }
  });

  after(async () => {
    await stopChecked(gw);
    await Promise.all(agents.map((a) => a.stop()));
  });

  test('slots come from llama-server /props, through the agent, to the gateway', async () => {
    for (const a of agents) {
      const props = await request(`${a.engineUrl}/props`);
      assert.equal(props.status, 200);
      assert.equal(props.json.total_slots, PARALLEL, 'llama-server /props total_slots = --parallel');
      const h = await a.health();
      assert.equal(h.json.status, 'ok');
      assert.equal(h.json.engine, 'llama-server');
      assert.equal(h.json.slots_total, PARALLEL, 'the agent took its slots from /props');
      assert.ok(a.logs.some((l) => l.msg === 'engine slots from /props' && l.slots === PARALLEL));
      const r = await waitForReplica(gw, a, (x) => x?.slots === PARALLEL, `${a.name}: ${PARALLEL} slots at the gateway`);
      assert.equal(r.state, 'healthy');
    }
  });

  test('chat completion, not streamed: real text, usage, finish_reason length', async () => {
    const c = await client.chat.completions.create(chat('Is transaction 4411 risky? Answer briefly.', { max_tokens: 24 }));
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.choices.length, 1);
    assert.equal(c.choices[0].message.role, 'assistant');
    assert.equal(typeof c.choices[0].message.content, 'string');
    assert.ok(c.choices[0].message.content.length > 0, 'some text');
    // The tiny model never samples an end-of-generation token: every answer runs to max_tokens.
    assert.equal(c.choices[0].finish_reason, 'length');
    assert.equal(c.usage.completion_tokens, 24);
    assert.ok(c.usage.prompt_tokens > 10, `prompt tokens counted by the real tokenizer: ${c.usage.prompt_tokens}`);
    assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
  });

  test('legacy completion, not streamed', async () => {
    const c = await client.completions.create({ model: MODEL, prompt: 'The account risk is', max_tokens: 8 });
    assert.equal(c.object, 'text_completion');
    assert.equal(c.usage.completion_tokens, 8);
    assert.equal(typeof c.choices[0].text, 'string');
  });

  test('Responses API through the gateway: responses.create whole and streamed (llama-server /v1/responses)', async () => {
    const whole = await client.responses.create({ model: MODEL, input: 'Is transaction 4411 risky?', max_output_tokens: 8 });
    assert.equal(whole.object, 'response');
    assert.equal(typeof whole.output_text, 'string');
    assert.ok(whole.usage.input_tokens > 0, `usage.input_tokens: ${JSON.stringify(whole.usage)}`);
    assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 8);
    const stream = await client.responses.create({ model: MODEL, input: 'Stream a short answer.', max_output_tokens: 8, stream: true });
    const types = [];
    let completed;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.completed') {
        completed = event.response;
      }
    }
    assert.equal(types[0], 'response.created');
    assert.ok(types.includes('response.output_text.delta'), types.join(','));
    assert.equal(types.at(-1), 'response.completed');
    assert.ok(completed.usage.output_tokens > 0);
  });

  test('Anthropic Messages API through the gateway: messages.create and messages.stream (llama-server /v1/messages)', async () => {
    const { default: Anthropic } = await import('@anthropic-ai/sdk');
    const anthropic = new Anthropic({ baseURL: gw.publicUrl, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
    const completionTokens = async () => (await Promise.all(agents.map(async (a) => {
      const m = /^fleetgate_agent_tokens_total\{kind="completion"\}\s+(\S+)/m.exec((await request(`${a.base}/metrics`)).text);
      return m ? Number(m[1]) : 0;
    }))).reduce((x, y) => x + y, 0);
    const tokensBefore = await completionTokens();
    const message = await anthropic.messages.create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'Is it risky?' }] });
    // The agent reads llama-server's Anthropic usage for its own metrics.
    assert.equal(await completionTokens(), tokensBefore + message.usage.output_tokens);
    assert.equal(message.type, 'message');
    assert.equal(message.content[0].type, 'text');
    assert.ok(message.usage.input_tokens > 0 && message.usage.output_tokens > 0, JSON.stringify(message.usage));
    const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'Stream it.' }] });
    const types = [];
    stream.on('streamEvent', (e) => types.push(e.type));
    const final = await stream.finalMessage();
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.ok(final.usage.output_tokens > 0);
    const count = await anthropic.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'Count me.' }] });
    assert.ok(count.input_tokens > 0);
  });

  test('chat completion streamed with stream_options.include_usage: chunks, then usage', async () => {
    const stream = await client.chat.completions.create(chat('Stream me a short answer.', {
      max_tokens: 32,
      stream: true,
      stream_options: { include_usage: true },
    }));
    let text = '';
    let contentChunks = 0;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) {
        usage = chunk.usage;
        assert.deepEqual(chunk.choices, [], 'usage comes in its own chunk with empty choices');
        continue;
      }
      const choice = chunk.choices[0];
      if (choice.delta?.content) {
        text += choice.delta.content;
        ++contentChunks;
      }
      if (choice.finish_reason) {
        finish = choice.finish_reason;
      }
    }
    assert.ok(contentChunks >= 16, `streamed token by token: ${contentChunks} content chunks`);
    assert.ok(text.length > 0);
    assert.equal(finish, 'length');
    assert.ok(usage, 'a usage chunk');
    assert.equal(usage.completion_tokens, 32);
  });

  test('raw streams: SSE events as llama-server sends them, [DONE], timings with the usage chunk', async () => {
    const raw = async (extra) => {
      const s = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
        body: chat('raw', { max_tokens: 12, stream: true, ...extra }),
        timeoutMs: 30000,
      });
      assert.equal(s.status, 200);
      assert.match(s.headers['content-type'], /text\/event-stream/);
      const events = parseSse(await s.done).filter((e) => e.data !== undefined);
      assert.equal(events.at(-1).data, '[DONE]');
      return events.slice(0, -1).map((e) => JSON.parse(e.data));
    };
    // Without include_usage: no usage chunk reaches the client (the gateway asks llama-server for
    // usage anyway, metrics.request_stream_usage, and strips that chunk again).
    let chunks = await raw({});
    const fin = chunks.find((c) => c.choices?.[0]?.finish_reason);
    assert.equal(fin.choices[0].finish_reason, 'length');
    assert.equal(fin.model, MODEL, 'llama-server --alias names the model');
    assert.ok(!chunks.some((c) => c.usage), 'no usage without stream_options.include_usage');
    assert.equal(chunks.filter((c) => c.choices?.[0]?.delta?.content).length, 12, 'one chunk per token');
    // With include_usage: llama-server puts usage and its timings in the final chunk.
    chunks = await raw({ stream_options: { include_usage: true } });
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 12);
    assert.equal(last.timings?.predicted_n, 12, 'llama.cpp timings relayed');
  });

  test('two agents share the load: 4 parallel streams fill both phones\' 2 slots', async () => {
    const before = await Promise.all(agents.map(agentRequests));
    const seenBusy = new Set();
    const polling = (async () => {
      for (let i = 0; i < 400 && seenBusy.size < 2; ++i) {
        for (const [i2, a] of agents.entries()) {
          const slots = await a.engineSlots();
          if (slots.filter((s) => s.is_processing).length === PARALLEL) {
            seenBusy.add(i2);
          }
        }
        await sleep(10);
      }
    })();
    const results = await Promise.all([0, 1, 2, 3].map(async (i) => {
      const stream = await client.chat.completions.create(chat(`parallel ${i}`, { max_tokens: 200, stream: true }));
      let n = 0;
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content) {
          ++n;
        }
      }
      return n;
    }));
    await polling;
    const afterCounts = await Promise.all(agents.map(agentRequests));
    const served = afterCounts.map((n, i) => n - before[i]);
    assert.deepEqual(served, [2, 2], `each agent served 2 of the 4 (served ${served})`);
    assert.ok(results.every((n) => n >= 150), `every stream ran to its end: ${results}`);
    assert.equal(seenBusy.size, 2, 'both llama-servers had both slots processing at once');
  });

  test('a prompt larger than the context: a clear 400 reaches the client', async () => {
    const huge = 'transaction '.repeat(CONTEXT * 2);
    await assert.rejects(
      client.chat.completions.create(chat(huge, { max_tokens: 4 })),
      (e) => {
        assert.ok(e instanceof APIError, `an APIError, got ${e}`);
        assert.equal(e.status, 400);
        assert.match(e.message, /context/i, `the message names the context: ${e.message}`);
        return true;
      },
    );
    // Not a replica failure: both stay healthy.
    for (const a of agents) {
      assert.equal((await replicaOf(gw, a)).state, 'healthy');
    }
  });

  test('client disconnects mid-stream: the llama.cpp slot is idle again within a second', async (t) => {
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      chat('a long answer please', { max_tokens: 1500, stream: true }),
      { signal: controller.signal },
    );
    let n = 0;
    let abortedAt = 0;
    let busyAgent = null;
    try {
      // (the SDK ends the iteration quietly when its request is aborted)
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content && ++n === 10) {
          // Which phone is generating it?
          for (const a of agents) {
            if ((await a.engineSlots()).some((s) => s.is_processing)) {
              busyAgent = a;
            }
          }
          abortedAt = performance.now();
          controller.abort();
        }
      }
    } catch (e) {
      assert.ok(abortedAt > 0 && /abort/i.test(String(e)), `only the abort ends the stream early: ${e}`);
    }
    assert.ok(abortedAt > 0, `the stream ended by itself after ${n} content chunks`);
    assert.ok(busyAgent, 'a llama-server slot was processing the stream before the disconnect');
    let idleAfter;
    await eventually(async () => {
      const slots = await busyAgent.engineSlots();
      if (slots.every((s) => !s.is_processing)) {
        idleAfter = performance.now() - abortedAt;
        return true;
      }
      return false;
    }, { timeoutMs: 1000, everyMs: 10, what: `${busyAgent.name}'s llama-server slots idle within 1 s of the disconnect` });
    t.diagnostic(`slot idle ${idleAfter.toFixed(0)} ms after the client left`);
    // The agent freed its slot too.
    await eventually(async () => (await busyAgent.health()).json.slots_idle === PARALLEL, { timeoutMs: 2000, what: 'agent slots idle' });
  });

  test('llama-server killed mid-stream: SSE error event, engine restarted, replica out of rotation then healthy, later requests fine', async (t) => {
    const logMark = gw.logs.length;
    const stream = await client.chat.completions.create(chat('keep talking', { max_tokens: 1500, stream: true }));
    let n = 0;
    let victim = null;
    let killedPid = null;
    let agentLogMark = 0;
    let caught = null;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content && ++n === 10) {
          for (const a of agents) {
            if ((await a.engineSlots()).some((s) => s.is_processing)) {
              victim = a;
            }
          }
          assert.ok(victim, 'found the llama-server generating the stream');
          killedPid = victim.enginePid();
          agentLogMark = victim.logs.length;
          process.kill(killedPid, 'SIGKILL');
        }
      }
    } catch (e) {
      caught = e;
    }
    assert.ok(caught, `the stream ended with an error (got ${n} content chunks and no error)`);
    assert.ok(caught instanceof APIError, `the SDK raised the SSE error event as an APIError: ${caught}`);
    assert.ok(n >= 10);
    assert.match(String(caught.error?.code), /failed/, `an engine failure event: ${JSON.stringify(caught.error)}`);
    t.diagnostic(`the client got: ${caught.message} (${JSON.stringify(caught.error)})`);

    // The agent restarts its engine.
    await victim.waitForLog((l) => l.msg === 'engine exited; restarting', { fromIndex: agentLogMark, what: 'engine exited; restarting' });
    const restarted = await victim.waitForLog((l) => l.msg === 'engine started' && l.pid !== killedPid, {
      fromIndex: agentLogMark,
      timeoutMs: 40000,
      what: 'engine started again',
    });
    assert.ok(alive(restarted.pid));

    // The gateway took the replica out of rotation, then back. The agent's /health answers 503
    // "loading" while llama-server restarts, which the gateway reads as a restarted replica:
    // `joining` ("model loading (replica restarted)"); a probe that failed outright would make it
    // `unhealthy`. Either way it is not routable until probes pass again.
    const id = (await replicaOf(gw, victim)).id;
    const changes = () => gw.logs.slice(logMark).filter((l) => l.msg === 'replica state changed' && l.replica === id);
    await eventually(() => changes().some((l) => l.from === 'healthy' && ['joining', 'unhealthy'].includes(l.to)), {
      timeoutMs: 20000,
      what: `${victim.name} out of rotation at the gateway`,
    });
    await eventually(() => {
      const c = changes();
      const down = c.findIndex((l) => l.from === 'healthy');
      return down >= 0 && c.slice(down + 1).some((l) => l.to === 'healthy');
    }, { timeoutMs: 40000, what: `${victim.name} healthy again at the gateway` });
    const down = changes().find((l) => l.from === 'healthy');
    t.diagnostic(`gateway: ${down.from} -> ${down.to} (${down.reason}), then -> healthy`);
    assert.equal((await victim.health()).json.slots_total, PARALLEL);

    // Later requests succeed, on both phones.
    const before = await Promise.all(agents.map(agentRequests));
    const answers = await Promise.all([0, 1, 2, 3].map((i) => client.chat.completions.create(chat(`after the crash ${i}`, { max_tokens: 64 }))));
    for (const c of answers) {
      assert.equal(c.usage.completion_tokens, 64);
    }
    const afterCounts = await Promise.all(agents.map(agentRequests));
    assert.deepEqual(afterCounts.map((x, i) => x - before[i]), [2, 2], 'both phones serve again');
  });

  test('tokens/s: one stream directly from llama-server and through the gateway (reported)', async (t) => {
    const measure = async (baseUrl) => {
      const s = await openStream(`${baseUrl}/v1/chat/completions`, {
        body: chat('speed', { max_tokens: 256, stream: true }),
        timeoutMs: 60000,
      });
      await s.done;
      let first = 0;
      let last = 0;
      let tokens = 0;
      for (const p of s.pieces) {
        const k = (p.text.match(/"content":"(?!")/g) ?? []).length;
        if (k > 0) {
          first ||= p.at;
          last = p.at;
          tokens += k;
        }
      }
      return { tokens, tps: (tokens - 1) / ((last - first) / 1000) };
    };
    const direct = await measure(agents[0].engineUrl);
    const viaGateway = await measure(gw.publicUrl);
    t.diagnostic(`direct ${direct.tps.toFixed(0)} tok/s, through the gateway ${viaGateway.tps.toFixed(0)} tok/s`);
    assert.ok(direct.tokens >= 200 && viaGateway.tokens >= 200);
  });
});
