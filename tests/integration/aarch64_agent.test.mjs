// The phone's fleetgate-agent as it ships: the static aarch64 binary of ./fleet build --target
// aarch64, run under qemu-aarch64-static (simulator engine) behind the x86 gateway. It is a static
// AArch64 executable; it registers with the gateway like a phone does (registration, no static
// endpoint), becomes healthy, serves the official openai client through the gateway (streaming and
// not), and on SIGTERM deregisters and exits 0.
//
// Emulation is slow and this machine is shared: every wait is for an event, with generous
// deadlines, and the health probe allows seconds per answer. FLEETGATE_SKIP_AARCH64=1 skips the
// file; without it a missing binary or qemu fails it (see lib/aarch64.mjs).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { AARCH64_AGENT_BIN, aarch64Gate, elfInfo, startEmulatedAgent } from './lib/aarch64.mjs';
import { freePort } from './lib/agent.mjs';
import { eventually, startGateway, stopChecked } from './lib/gateway.mjs';
import { TOKEN_ENV, replicaByUrl, waitForState } from './lib/lifecycle_util.mjs';

const MODEL = 'qwen3.5-0.8b-arm';
const skip = aarch64Gate([AARCH64_AGENT_BIN]);

// Emulated answers take longer than native ones: probe every second, allow most of it per answer.
const EMULATION_HEALTH = { interval: '1s', timeout: '900ms', unhealthy_after: 3, healthy_after: 2, eject_after: 3 };

// Skipped: one skipped test that names the reason (the summary counts it).
const suite = skip ? (title) => test(title, { skip }, () => {}) : describe;

suite('aarch64 fleetgate-agent under qemu behind the x86 gateway', () => {
  let OpenAI;
  let gw;
  let agent;
  let url;

  before(async () => {
    OpenAI = (await import('openai')).default;
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: {
        token_env: 'FG_IT_REGISTRATION_TOKEN',
        allowed_urls: ['http://127.0.0.1:*'],
        heartbeat_interval: '1s',
      },
      health: EMULATION_HEALTH,
      models: [{ name: MODEL, endpoints: [] }],
      routing: { queue_timeout: '60s' },
    }, { env: TOKEN_ENV });
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    agent = await startEmulatedAgent([
      '--listen', `127.0.0.1:${port}`, '--model', MODEL, '--profile', 'qwen3.5-0.8b/snapdragon-8-elite',
      '--time-scale', '50', '--public-url', url, '--gateway-url', gw.adminUrl,
      '--gateway-token-env', 'FG_IT_REGISTRATION_TOKEN', '--drain-timeout', '10',
    ], { env: TOKEN_ENV });
  });

  after(async () => {
    await agent?.stop();
    await stopChecked(gw);
  });

  test('the binary is a static AArch64 executable', () => {
    const info = elfInfo(AARCH64_AGENT_BIN);
    assert.equal(info.aarch64, true, `ELF machine ${info.machine}`);
    assert.equal(info.static, true, 'no interpreter, no dynamic section');
  });

  test('registers with the gateway and becomes healthy', async () => {
    await waitForState(gw, url, 'healthy', { timeoutMs: 60000 });
    const entry = await replicaByUrl(gw, url);
    assert.equal(entry.source, 'registration');
    assert.equal(entry.slots, 4, 'the profile\'s 4 slots');
    assert.ok(entry.device.cpu_cores > 0, JSON.stringify(entry.device));
  });

  test('serves the official openai client through the gateway, streaming and not', async () => {
    const client = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    const messages = [{ role: 'user', content: 'Is this transaction risky?' }];
    const answer = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 16 });
    assert.equal(answer.object, 'chat.completion');
    assert.equal(answer.model, MODEL);
    assert.ok(answer.choices[0].message.content.length > 0, JSON.stringify(answer));
    assert.ok(answer.usage.completion_tokens > 0 && answer.usage.completion_tokens <= 16, JSON.stringify(answer.usage));

    const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 16, stream: true });
    let text = '';
    let chunks = 0;
    let finish = null;
    for await (const chunk of stream) {
      ++chunks;
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(chunks > 1, `${chunks} chunks`);
    assert.ok(text.length > 0);
    assert.ok(finish === 'length' || finish === 'stop', `finish_reason ${finish}`);
    await eventually(() => agent.logs.filter((l) => l.msg === 'request' && l.status === 200).length >= 2, {
      timeoutMs: 10000, what: 'the emulated agent logging both requests',
    });
  });

  test('SIGTERM deregisters from the gateway and exits 0', async () => {
    const { code } = await agent.stop();
    assert.equal(code, 0, agent.text.slice(-2000));
    assert.ok(agent.logs.some((l) => l.msg === 'deregistered from the gateway'), JSON.stringify(agent.logs.slice(-5)));
    await eventually(async () => (await replicaByUrl(gw, url)) === undefined, {
      timeoutMs: 10000, what: 'the replica removed from GET /admin/v1/replicas',
    });
  });
});
