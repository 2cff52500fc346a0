// Chaos: deeply nested JSON (100k levels, and 30k levels where a listener's body limit is lower)
// on every route that takes a JSON body: the gateway's public /v1/* routes, its registration and
// heartbeat routes, its admin API routes, and the agent's routes. Every request must get exactly
// one terminal answer (a 4xx, never a 5xx, a hang or a crash: the limit is a clear 400, or 413
// where the body is over the listener's limit); the gateway and the agent stay up and serving;
// the healthy phone stays healthy and keeps serving a control client; the gateway's RSS stays
// under RSS_BOUND. Admin-listener connection floods from one address are refused past
// max_connections_per_ip (64) while registrations and heartbeats from other addresses go on.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startAgent, stopAgent, alive } from '../integration/lib/agent.mjs';
import { startFakeReplica } from '../integration/lib/fake_replica.mjs';
import { request, startGateway, stopChecked } from '../integration/lib/gateway.mjs';
import { ADMIN_TOKEN, REGISTRATION_TOKEN, TOKEN_ENV, register } from '../integration/lib/lifecycle_util.mjs';
import { rawConnect } from '../integration/lib/raw_client.mjs';
import { MiB, RSS_BOUND, Watch, assertAllTerminal, terminalAnswer } from './lib/invariants.mjs';

const DEADLINE_MS = 20000;
const AGENT_KEY = 'sk-chaos-agent-1';
const TEST_TIMEOUT = { timeout: 120000 };

const arrays = (n) => `${'['.repeat(n)}${']'.repeat(n)}`;
const objects = (n) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
// The nesting where each route reads something: the messages, a field it ignores, the whole body
// (objects take 6 bytes a level, arrays 2: both bodies are about 2n bytes).
const shapes = (n) => [
  `{"model":"m","messages":${arrays(n)}}`,
  `{"model":"m","messages":[{"role":"user","content":"x"}],"extra":${objects(Math.floor(n / 3))}}`,
  arrays(n),
];

describe('chaos: deeply nested JSON on every JSON route', () => {
  let gw;
  let phone;
  let registered; // a registered replica: its id and secret, for the heartbeat routes
  let agent;
  let watch;
  const admin = { Authorization: `Bearer ${ADMIN_TOKEN}` };

  before(async () => {
    phone = await startFakeReplica({ name: 'healthy' });
    registered = await startFakeReplica({ name: 'registered' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { token_env: 'FG_IT_REGISTRATION_TOKEN', allowed_urls: ['http://127.0.0.1:*'] },
      health: { interval: '500ms', timeout: '400ms', unhealthy_after: 3, healthy_after: 1, eject_after: 3 },
      models: [{ name: 'm', endpoints: [{ url: phone.url, slots: 4 }] }],
    }, { env: TOKEN_ENV });
    const reg = await register(gw, { url: registered.url, model: 'm', slots: 1, agent_version: 'chaos', device: {} });
    assert.ok(reg.status === 200 || reg.status === 201, reg.text);
    registered.id = reg.json.id;
    registered.secret = reg.json.secret;
    agent = await startAgent(['--listen', '127.0.0.1:0', '--model', 'm', '--api-key-env', 'FG_CHAOS_AGENT_KEY'], {
      env: { FG_CHAOS_AGENT_KEY: AGENT_KEY },
    });
    watch = await new Watch({
      gw, healthy: [{ url: phone.url, model: 'm' }], control: { model: 'm' }, adminHeaders: admin, rssBoundBytes: RSS_BOUND, deadlineMs: DEADLINE_MS,
    }).start();
  });

  after(async () => {
    await watch?.stop();
    if (watch) {
      console.log(watch.report('nested JSON'));
    }
    stopAgent(agent);
    await stopChecked(gw);
    await phone?.close();
    await registered?.close();
  });

  // Sends each body to each route; every answer must be terminal with a status in `allowed`.
  async function attack(base, routes, bodies, headers, allowed) {
    const results = [];
    for (const [method, path] of routes) {
      for (const body of bodies) {
        const r = await terminalAnswer(base, path, body, { method, headers, deadlineMs: DEADLINE_MS });
        r.route = `${method} ${path} (${body.length} bytes)`;
        results.push(r);
      }
    }
    assertAllTerminal(results, routes.map((r) => r[1]).join(', '));
    const wrong = results.filter((r) => !allowed.includes(r.status)).map((r) => `${r.route}: ${r.status} ${r.body.slice(0, 100)}`);
    assert.deepEqual(wrong, [], `statuses outside ${allowed}`);
    return results;
  }

  test('the public /v1/* routes answer 400 at 100k levels', TEST_TIMEOUT, async () => {
    watch.begin('nested JSON: public routes');
    const results = await attack(gw.publicUrl,
      [['POST', '/v1/chat/completions'], ['POST', '/v1/completions'], ['POST', '/v1/embeddings']],
      shapes(100000), {}, [400]);
    assert.ok(results.every((r) => /nest|depth|deeper/i.test(r.body)), 'the 400 says what is wrong');
    assert.deepEqual(phone.requests.filter((r) => !r.rawBody.includes('control')).length, 0, 'nothing but the control requests reached the phone');
    await watch.checkpoint('nested JSON: public routes');
  });

  test('registration and heartbeat routes: 413 at 100k levels (over 64 KiB), 400 at 30k', TEST_TIMEOUT, async () => {
    watch.begin('nested JSON: registration routes');
    const headers = { Authorization: `Bearer ${REGISTRATION_TOKEN}`, 'Fleetgate-Replica-Secret': registered.secret };
    const device = (n) => `{"url":"http://127.0.0.1:9","model":"m","slots":1,"agent_version":"x","device":{"a":${arrays(n)}}}`;
    await attack(gw.adminUrl, [['POST', '/admin/v1/replicas/register']], [...shapes(100000), device(100000)], headers, [413]);
    await attack(gw.adminUrl, [['POST', '/admin/v1/replicas/register']], [...shapes(30000), device(30000)], headers, [400]);
    // Heartbeats and deregistrations carry no body the gateway needs: a nested one is not read
    // as JSON, the call is judged on its token and secret (200 here for the heartbeat).
    await attack(gw.adminUrl, [['POST', `/admin/v1/replicas/${registered.id}/heartbeat`]], shapes(30000), headers, [200, 400]);
    await attack(gw.adminUrl, [['POST', '/admin/v1/replicas/nope/heartbeat'], ['POST', '/admin/v1/replicas/nope/deregister']],
      shapes(30000), headers, [400, 403, 404]);
    await watch.checkpoint('nested JSON: registration routes');
  });

  test('admin API routes: answered, never 5xx', TEST_TIMEOUT, async () => {
    watch.begin('nested JSON: admin API routes');
    const routes = [
      ['GET', '/admin/v1/replicas'], ['GET', '/admin/v1/fleet'],
      ['POST', '/admin/v1/replicas/nope/drain'], ['POST', '/admin/v1/replicas/nope/undrain'], ['DELETE', '/admin/v1/replicas/nope'],
    ];
    await attack(gw.adminUrl, routes, shapes(30000), admin, [200, 400, 404, 405]);
    await attack(gw.adminUrl, routes, [arrays(100000)], admin, [413]);
    await watch.checkpoint('nested JSON: admin API routes');
  });

  test("the agent's routes answer 400 at 100k levels and it keeps serving", TEST_TIMEOUT, async () => {
    watch.begin("nested JSON: the agent's routes");
    await attack(agent.base, [['POST', '/v1/chat/completions'], ['POST', '/v1/completions']], shapes(100000),
      { Authorization: `Bearer ${AGENT_KEY}` }, [400]);
    assert.ok(alive(agent.proc.pid), 'the agent is alive');
    assert.equal((await request(`${agent.base}/health`)).status, 200);
    const ok = await request(`${agent.base}/v1/chat/completions`, {
      method: 'POST', headers: { Authorization: `Bearer ${AGENT_KEY}` }, body: { model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 },
    });
    assert.equal(ok.status, 200, ok.text);
    await watch.checkpoint("nested JSON: the agent's routes");
  });

  test('an admin connection flood from one address stops at its per-address cap; others go on', TEST_TIMEOUT, async () => {
    watch.begin('admin listener: idle connections past the per-address cap');
    const flood = [];
    try {
      // 127.0.0.2 is another client address on Linux's loopback.
      for (let i = 0; i < 80; ++i) {
        flood.push(await rawConnect(gw.adminUrl, { localAddress: '127.0.0.2' }));
      }
      await gw.waitForMetric('fleetgate_connections_rejected_total', { listener: 'admin', reason: 'max_connections_per_ip' },
        (v) => v === 16, { timeoutMs: DEADLINE_MS });
      const hb = await request(`${gw.adminUrl}/admin/v1/replicas/${registered.id}/heartbeat`, {
        method: 'POST', headers: { Authorization: `Bearer ${REGISTRATION_TOKEN}`, 'Fleetgate-Replica-Secret': registered.secret },
      });
      assert.equal(hb.status, 200, `a heartbeat from another address during the flood: ${hb.text}`);
      await watch.checkpoint('admin listener: idle connections past the per-address cap');
    } finally {
      flood.forEach((c) => c.destroy());
    }
  });
});
