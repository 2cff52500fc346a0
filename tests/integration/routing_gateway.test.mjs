// Routing on the request path (docs/routing.md): the priority header (and its 400), shedding of
// sheddable requests with 503 + Retry-After, a higher band overtaking a lower one in the queue,
// per-key priorities and tenants, prompt-cache affinity under expected_finish, and speeds learned
// from answers' timings or reported by an agent's /health, shown in /admin/v1/replicas and as
// metrics. Fake replicas on 127.0.0.1; every wait polls a condition with a deadline.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, metricValue, openAiError, postJson, request, startGateway, stopChecked } from './lib/gateway.mjs';

const chat = (model, content, extra = {}) => ({ model, messages: [{ role: 'user', content }], ...extra });

async function replicasJson(gw) {
  const res = await request(`${gw.adminUrl}/admin/v1/replicas`);
  assert.equal(res.status, 200, res.text);
  return JSON.parse(res.text).replicas ?? JSON.parse(res.text);
}

describe('priorities, bands and shedding', () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'p1', mode: { type: 'hold' } });
    gw = await startGateway({
      models: [{ name: 'm', endpoints: [{ url: replica.url, slots: 1 }] }],
      routing: { queue_max: 100, queue_timeout: '20s', shed_retry_after_min: '2s' },
    });
  });
  after(async () => {
    replica?.release();
    await stopChecked(gw);
    await replica?.close();
  });

  test('a priority header that is not a whole number in [-1000, 1000] is refused with 400 naming it', async () => {
    for (const bad of ['high', '1001', '-1001', '1.5', '0x10']) {
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'x'), {
        headers: { 'x-fleetgate-priority': bad },
      });
      assert.equal(res.status, 400, `${bad}: ${res.text}`);
      const error = openAiError(res);
      assert.equal(error.code, 'invalid_priority');
      assert.match(error.message, /x-fleetgate-priority/);
    }
    assert.equal(replica.requests.length, 0, 'nothing reached the replica');
  });

  test('a sheddable request is refused at once with 503 and Retry-After while the fleet is saturated; a higher band overtakes a lower one', async () => {
    const first = postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'first'));
    await replica.waitFor((r) => r.requests.length === 1, { what: 'the first request' });

    const shed = await postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'shed me'), {
      headers: { 'x-fleetgate-priority': '-5' },
    });
    assert.equal(shed.status, 503, shed.text);
    assert.equal(openAiError(shed).code, 'shed');
    const retryAfter = Number(shed.headers['retry-after']);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 2, `Retry-After ${shed.headers['retry-after']}`);
    const metrics = await gw.metrics();
    assert.equal(metricValue(metrics, 'fleetgate_requests_shed_total', { model: 'm' }), 1);

    // Queued in arrival order: band 0 first, then band 10. The band-10 request goes first.
    const low = postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'low'), { headers: { 'x-fleetgate-priority': '0' } });
    await eventually(async () => metricValue(await gw.metrics(), 'fleetgate_queue_depth', { model: 'm' }) === 1, { what: 'low queued' });
    const high = postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'high'), { headers: { 'x-fleetgate-priority': '10' } });
    await eventually(async () => metricValue(await gw.metrics(), 'fleetgate_queue_depth', { model: 'm' }) === 2, { what: 'high queued' });
    replica.release();
    await replica.waitFor((r) => r.requests.length === 2, { what: 'the second request' });
    assert.equal(replica.requests[1].json.messages[0].content, 'high', 'the higher band was served first');
    replica.release();
    await replica.waitFor((r) => r.requests.length === 3, { what: 'the third request' });
    assert.equal(replica.requests[2].json.messages[0].content, 'low');
    replica.release();
    for (const res of await Promise.all([first, low, high])) {
      assert.equal(res.status, 200, res.text);
    }
  });
});

describe('named API keys: configured priority and tenant', () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'k1', mode: { type: 'hold' } });
    gw = await startGateway(
      {
        server: {
          api_keys: [
            { name: 'guard', key_env: 'RT_GUARD_KEY', priority: 5 },
            { name: 'scratch', key_env: 'RT_SCRATCH_KEY', priority: -1 },
          ],
        },
        models: [{ name: 'm', endpoints: [{ url: replica.url, slots: 1 }] }],
        routing: { queue_max: 100, queue_timeout: '20s' },
      },
      { env: { RT_GUARD_KEY: 'guard-secret', RT_SCRATCH_KEY: 'scratch-secret' } },
    );
  });
  after(async () => {
    replica?.release();
    await stopChecked(gw);
    await replica?.close();
  });

  test('a key with a negative priority is shed when saturated; the header overrides the key; the log names the key, never shows it', async () => {
    const auth = (key) => ({ headers: { Authorization: `Bearer ${key}` } });
    const first = postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'first'), auth('guard-secret'));
    await replica.waitFor((r) => r.requests.length === 1, { what: 'the first request' });
    const shed = await postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'x'), auth('scratch-secret'));
    assert.equal(shed.status, 503, shed.text);
    assert.ok(shed.headers['retry-after']);
    // The same key with a client priority of 0 queues instead.
    const queued = postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'queued'), {
      headers: { Authorization: 'Bearer scratch-secret', 'x-fleetgate-priority': '0' },
    });
    await eventually(async () => metricValue(await gw.metrics(), 'fleetgate_queue_depth', { model: 'm' }) === 1, { what: 'queued' });
    replica.release();
    await replica.waitFor((r) => r.requests.length === 2, { what: 'the queued request' });
    replica.release();
    for (const res of await Promise.all([first, queued])) {
      assert.equal(res.status, 200, res.text);
    }
    assert.ok(!gw.stderrText.includes('guard-secret') && !gw.stderrText.includes('scratch-secret'), 'keys never logged');
  });
});

describe('expected_finish: prompt-cache affinity and learned speeds', () => {
  const replicas = [];
  let gw;
  // A long shared instruction prefix (~8 KB) and short unique cases.
  const instructions = 'You review card transactions for fraud. '.repeat(200);

  before(async () => {
    for (const name of ['a', 'b', 'c']) {
      replicas.push(
        await startFakeReplica({
          name,
          mode: { timings: { prompt_n: 100, prompt_ms: 500, predicted_n: 5, predicted_ms: 250, cache_n: 0 } },
        }),
      );
    }
    gw = await startGateway({
      models: [{ name: 'm', slots: 1, endpoints: replicas.map((r) => r.url) }],
      routing: { policy: 'expected_finish', exploration: 0, queue_timeout: '20s' },
    });
  });
  after(async () => {
    await stopChecked(gw);
    for (const r of replicas) {
      await r.close();
    }
  });

  test('requests sharing a long prefix go to the phone that served it, not to the one a tie would pick', async () => {
    const servedBy = (tag) => replicas.findIndex((r) => r.requests.some((q) => q.json.messages[0].content.endsWith(tag)));
    // A held request takes the phone a tie between free phones picks; the first review goes to
    // another one, which then holds its instructions.
    const held = postJson(gw.publicUrl, '/v1/chat/completions', chat('m', 'hold', { fake: { type: 'hold' } }));
    await eventually(() => replicas.some((r) => r.holds.length === 1), { what: 'the held request' });
    const tie = replicas.findIndex((r) => r.holds.length === 1);
    const first = await postJson(gw.publicUrl, '/v1/chat/completions', chat('m', `${instructions}\nCase 0`));
    assert.equal(first.status, 200, first.text);
    const owner = servedBy('Case 0');
    assert.notEqual(owner, tie);
    replicas[tie].release();
    assert.equal((await held).status, 200);
    // Every phone is free now; the one holding the prefix finishes a review first.
    const served = [];
    for (let i = 1; i <= 5; ++i) {
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('m', `${instructions}\nCase ${i}`));
      assert.equal(res.status, 200, res.text);
      served.push(servedBy(`Case ${i}`));
    }
    assert.deepEqual(served, [owner, owner, owner, owner, owner], `the prefix is on phone ${owner}; the tie would pick ${tie}`);
  });

  test('speeds learned from the answers\' timings appear in /admin/v1/replicas and as gauges', async () => {
    const list = await replicasJson(gw);
    const learned = list.filter((r) => r.speeds?.source === 'learned');
    assert.ok(learned.length >= 1, JSON.stringify(list.map((r) => r.speeds)));
    // The phone that served the reviews (the held request's phone learned from one short prompt).
    const r = learned.reduce((best, x) => (x.prompt_cache.slot_blocks > best.prompt_cache.slot_blocks ? x : best));
    assert.ok(r.speeds.prefill_samples >= 1 && r.speeds.decode_samples >= 1, JSON.stringify(r.speeds));
    // Timings: 100 prompt tokens in 500 ms = 200/s; 5 tokens in 250 ms = 20/s (smoothed from 50/10).
    assert.ok(r.speeds.prefill_tokens_per_second > 50, JSON.stringify(r.speeds));
    assert.ok(r.speeds.decode_tokens_per_second > 10, JSON.stringify(r.speeds));
    assert.ok(r.prompt_cache.slot_blocks > 0, JSON.stringify(r.prompt_cache));
    const metrics = await gw.metrics();
    const gauge = metricValue(metrics, 'fleetgate_replica_prefill_tokens_per_second', { model: 'm', replica: r.id });
    assert.ok(Math.abs(gauge - r.speeds.prefill_tokens_per_second) < 1e-6 * gauge + 1e-9, `gauge ${gauge}`);
    assert.ok(metricValue(metrics, 'fleetgate_prompt_cache_blocks') > 0);
    assert.ok(metricValue(metrics, 'fleetgate_prompt_cache_bytes') > 0);
    assert.ok(!metrics.includes('You review'), 'no prompt text in the metrics');
  });
});

describe("an agent's /health speeds seed the scheduler", () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'h1' });
    replica.healthExtra = { model: 'm', slots_total: 1, slots_idle: 1, prefill_tps: 123.5, decode_tps: 7.25, host_prompt_cache_tokens: 4096, engine_starts: 1 };
    gw = await startGateway({
      health: { interval: '200ms', timeout: '100ms', healthy_after: 1 },
      models: [{ name: 'm', endpoints: [{ url: replica.url, slots: 1 }] }],
    });
  });
  after(async () => {
    await stopChecked(gw);
    await replica?.close();
  });

  test('prefill_tps and decode_tps show as the agent source; the host prompt cache as its capacity', async () => {
    let seen;
    await eventually(async () => {
      seen = (await replicasJson(gw))[0];
      return seen?.speeds?.source === 'agent';
    }, { what: 'speeds from /health', timeoutMs: 8000 });
    assert.equal(seen.speeds.prefill_tokens_per_second, 123.5);
    assert.equal(seen.speeds.decode_tokens_per_second, 7.25);
    assert.ok(seen.prompt_cache.host_capacity_blocks > 0, JSON.stringify(seen.prompt_cache));
  });
});
