// Real inference on the phone's binaries: the static aarch64 llama-server
// (scripts/llama/build.sh --target aarch64, tuned for Snapdragon 8 Elite class CPUs: dotprod, i8mm,
// fp16) and the static aarch64 fleetgate-agent, both under qemu-aarch64-static, with the tiny
// test model (scripts/llama/make_tiny_model.py). The emulated agent starts and supervises the
// emulated llama-server as on a phone; the test asks llama-server directly, then through the agent
// and the x86 gateway with the official openai client (streaming and not), and checks that the
// agent's SIGTERM stops its engine.
//
// Emulation is slow (the model loads in seconds natively, longer here): every wait is for an
// event with a generous deadline. Skipped with FLEETGATE_SKIP_AARCH64=1 or FLEETGATE_SKIP_LLAMA=1
// (then neither llama-server nor the model is built); otherwise a missing binary, qemu or model
// fails the file.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { AARCH64_AGENT_BIN, AARCH64_LLAMA_SERVER, aarch64Gate, elfInfo, findQemu, startEmulatedAgent } from './lib/aarch64.mjs';
import { alive, freePort } from './lib/agent.mjs';
import { REPO_ROOT, eventually, makeTempDir, removeDir, request, startGateway, stopChecked, toYaml } from './lib/gateway.mjs';

const LLAMA_CACHE = process.env.FLEETGATE_LLAMA_CACHE || path.join(REPO_ROOT, '.cache', 'llama');
const MODEL_FILE = process.env.FLEETGATE_LLAMA_MODEL || path.join(LLAMA_CACHE, 'models', 'tiny-qwen2.gguf');
const MAKE_MODEL = path.join(REPO_ROOT, 'scripts', 'llama', 'make_tiny_model.py');
const MODEL = 'tiny-qwen2';
const PARALLEL = 2;
// Emulated floating point is slow (each answer token costs a large share of a second here): short
// answers keep the file's time down.
const ANSWER_TOKENS = 4;

function gate() {
  const skip = aarch64Gate([AARCH64_AGENT_BIN, AARCH64_LLAMA_SERVER], {
    extraSkip: process.env.FLEETGATE_SKIP_LLAMA === '1' ? 'FLEETGATE_SKIP_LLAMA=1' : null,
  });
  if (skip || fs.existsSync(MODEL_FILE)) {
    return skip;
  }
  // The model is made from the llama.cpp source tree when missing (deterministic, ~15 s), as
  // llama_e2e.test.mjs does.
  const r = spawnSync(MAKE_MODEL, ['--out', MODEL_FILE], { encoding: 'utf8', timeout: 120000 });
  if (r.status !== 0 || !fs.existsSync(MODEL_FILE)) {
    throw new Error(`the tiny model ${MODEL_FILE} is missing and could not be made: ${(r.stderr || r.error?.message || '').trim().split('\n').at(-1)}`);
  }
  return null;
}
const skip = gate();

// Skipped: one skipped test that names the reason (the summary counts it).
const suite = skip ? (title) => test(title, { skip }, () => {}) : describe;

suite('aarch64 llama-server under qemu, behind the aarch64 agent and the x86 gateway', () => {
  let OpenAI;
  let dir;
  let agent;
  let gw;
  let engineUrl;

  before(async () => {
    OpenAI = (await import('openai')).default;
    dir = makeTempDir('fleetgate-aarch64-llama-');
    const enginePort = await freePort();
    engineUrl = `http://127.0.0.1:${enginePort}`;
    const agentPort = await freePort();
    const configPath = path.join(dir, 'agent.yaml');
    fs.writeFileSync(configPath, toYaml({
      listen: `127.0.0.1:${agentPort}`,
      model: MODEL,
      engine: {
        kind: 'llama-server',
        url: engineUrl,
        // No binfmt_misc here: the emulated agent starts its engine through the emulator too.
        command: [
          findQemu(), AARCH64_LLAMA_SERVER,
          '--model', MODEL_FILE, '--host', '127.0.0.1', '--port', String(enginePort), '--alias', MODEL,
          '--parallel', String(PARALLEL), '--ctx-size', '512', '--threads', '1', '--threads-batch', '1',
          '--no-webui',
        ],
      },
      drain_timeout: '5s',
      log: { level: 'info' },
    }));
    agent = await startEmulatedAgent(['--config', configPath]);
    await eventually(async () => {
      if (!agent.running) {
        throw new Error(`the aarch64 agent exited\n${agent.text.slice(-3000)}`);
      }
      return (await request(`${agent.base}/health`, { timeoutMs: 10000 }).catch(() => ({}))).status === 200;
    }, { timeoutMs: 180000, everyMs: 200, what: 'the aarch64 agent healthy (its emulated llama-server loaded)' })
      .catch((e) => {
        e.message += `\n--- agent and engine output (tail) ---\n${agent.text.slice(-3000)}`;
        throw e;
      });
    gw = await startGateway({
      health: { interval: '1s', timeout: '900ms', unhealthy_after: 3, healthy_after: 1, eject_after: 3 },
      models: [{ name: MODEL, endpoints: [agent.base] }],
      upstream: { first_byte_timeout: '120s', idle_timeout: '60s' },
      routing: { queue_timeout: '120s' },
    });
  });

  after(async () => {
    await stopChecked(gw);
    await agent?.stop();
    removeDir(dir);
  });

  test('llama-server is a static AArch64 executable', () => {
    const info = elfInfo(AARCH64_LLAMA_SERVER);
    assert.equal(info.aarch64, true, `ELF machine ${info.machine}`);
    assert.equal(info.static, true, 'no interpreter, no dynamic section');
  });

  test('llama-server answers directly with the tiny model', async () => {
    const props = await request(`${engineUrl}/props`, { timeoutMs: 30000 });
    assert.equal(props.status, 200, props.text);
    assert.equal(props.json.total_slots, PARALLEL);
    const res = await request(`${engineUrl}/v1/chat/completions`, {
      method: 'POST', timeoutMs: 120000,
      body: { model: MODEL, max_tokens: ANSWER_TOKENS, messages: [{ role: 'user', content: 'Is transaction 4411 risky?' }] },
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.object, 'chat.completion');
    assert.ok(res.json.choices[0].message.content.length > 0, res.text);
    assert.equal(res.json.usage.completion_tokens, ANSWER_TOKENS);
    assert.ok(res.json.usage.prompt_tokens > 5, `prompt tokens counted by the real tokenizer: ${res.json.usage.prompt_tokens}`);
  });

  test('the agent took its slots from llama-server and the gateway routes the openai client to it', async () => {
    const health = await request(`${agent.base}/health`, { timeoutMs: 10000 });
    assert.equal(health.json.engine, 'llama-server');
    assert.equal(health.json.slots_total, PARALLEL, JSON.stringify(health.json));
    const client = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    const messages = [{ role: 'user', content: 'Is transaction 4411 risky? Answer briefly.' }];
    await eventually(async () => (await request(`${gw.adminUrl}/admin/v1/replicas`)).json?.replicas?.[0]?.state === 'healthy', {
      timeoutMs: 60000, everyMs: 100, what: 'the agent healthy at the gateway',
    });
    const c = await client.chat.completions.create({ model: MODEL, messages, max_tokens: ANSWER_TOKENS });
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.choices[0].finish_reason, 'length', 'the tiny model never samples an end token');
    assert.equal(c.usage.completion_tokens, ANSWER_TOKENS);

    const stream = await client.chat.completions.create({
      model: MODEL, messages, max_tokens: ANSWER_TOKENS, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    assert.ok(text.length > 0);
    assert.equal(finish, 'length');
    assert.equal(usage?.completion_tokens, ANSWER_TOKENS, JSON.stringify(usage));
  });

  test('SIGTERM stops the agent and the engine it started', async () => {
    const started = agent.logs.filter((l) => l.msg === 'engine started');
    assert.ok(started.length >= 1, JSON.stringify(agent.logs.slice(-5)));
    const { code } = await agent.stop();
    assert.equal(code, 0, agent.text.slice(-2000));
    for (const l of started) {
      await eventually(() => !alive(l.pid), { timeoutMs: 20000, what: `engine pid ${l.pid} gone` });
    }
  });
});
