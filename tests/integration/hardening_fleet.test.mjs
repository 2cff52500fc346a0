// Hardening of the fleet side (issue 11): registration bodies nested too deeply are refused with a
// 400 instead of crashing the gateway; registration identity (a per-replica secret guards
// heartbeats, deregistration, updates and moves; a registration that missed its heartbeats may be
// taken over; a static endpoint keeps its model and slot ceiling; allowed_urls wildcards stay
// within one part of a URL; userinfo is refused); an agent restarted without its secret gets its
// URL back; a probe notices a phone that serves another model.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { freePort, startAgent, stopAgent } from './lib/agent.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, request, startGateway, stopChecked } from './lib/gateway.mjs';
import {
  FAST_HEALTH, REGISTRATION_TOKEN, TOKEN_ENV, admin, chat, deregister, heartbeat, register, replicaByUrl, replicas,
  served, setProbe, waitForReplica, waitForState, waitForStateLog,
} from './lib/lifecycle_util.mjs';

const REGISTRATION = {
  token_env: 'FG_IT_REGISTRATION_TOKEN',
  allowed_urls: ['http://127.0.0.1:*'],
  expire_after: '60s',
  heartbeat_interval: '10s',
};

const nested = (depth) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
const agentBody = (url, model = 'm', extra = {}) => ({ url, model, slots: 1, agent_version: '0.1.0-it', ...extra });

describe('registration bodies from the network', () => {
  let fixed;
  let phone;
  let gw;

  before(async () => {
    fixed = await startFakeReplica({ name: 'fixed' });
    phone = await startFakeReplica({ name: 'phone' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [{ name: 'm', endpoints: [fixed.url] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await stopChecked(gw);
    await fixed?.close();
    await phone?.close();
  });

  test('a device nested 100,000 levels deep is refused and the gateway lives on', async () => {
    // 200 KB: over the admin listener's 64 KiB body limit, refused before it is parsed (413).
    const huge = `{"url":"${phone.url}","model":"m","slots":1,"device":{"a":${nested(100000)}}}`;
    const tooLarge = await register(gw, huge);
    assert.equal(tooLarge.status, 413, tooLarge.text);
    // 30,000 levels fit in the body limit: refused by the depth limit (400), never walked.
    const body = `{"url":"${phone.url}","model":"m","slots":1,"device":{"a":${nested(30000)}}}`;
    const res = await register(gw, body);
    assert.equal(res.status, 400, res.text);
    assert.match(res.json?.error?.message ?? '', /nest|deep/i);
    assert.ok(gw.running, 'the gateway is still running');
    assert.equal((await request(`${gw.adminUrl}/healthz`)).status, 200);
    assert.equal((await replicas(gw)).filter((r) => r.url === phone.url).length, 0, 'nothing was added');
    // A body within the limit still registers.
    const ok = await register(gw, { url: phone.url, model: 'm', slots: 1, device: { a: JSON.parse(nested(20)) } });
    assert.equal(ok.status, 200, ok.text);
  });

  test('a URL with userinfo is refused', async () => {
    const url = phone.url.replace('http://', 'http://user:pw@');
    const res = await register(gw, agentBody(url));
    assert.equal(res.status, 400, res.text);
    assert.match(res.json.error.message, /userinfo/);
  });
});

describe('registration identity', () => {
  let fixed; // static endpoint of model m, 2 slots
  const fakes = [];
  let gw;

  before(async () => {
    fixed = await startFakeReplica({ name: 'fixed' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [
        { name: 'm', endpoints: [{ url: fixed.url, slots: 2 }] },
        { name: 'other', endpoints: [] },
      ],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await stopChecked(gw);
    for (const f of [fixed, ...fakes]) {
      await f.close();
    }
  });

  async function phone(name) {
    const f = await startFakeReplica({ name });
    fakes.push(f);
    return f;
  }

  test('registering returns a secret; heartbeats and deregistration need it', async () => {
    const p = await phone('p1');
    const res = await register(gw, agentBody(p.url));
    assert.equal(res.status, 200, res.text);
    const { id, secret } = res.json;
    assert.match(secret, /^[0-9a-f]{64}$/, 'a 256-bit secret');
    assert.ok(!gw.stderrText.includes(secret), 'the secret is never logged');
    // The last digit changed to another (a fixed '0' would equal the secret one time in 16).
    const lastChanged = `${secret.slice(0, -1)}${secret.endsWith('0') ? '1' : '0'}`;
    for (const wrong of [undefined, '', lastChanged, `${secret}0`, 'x']) {
      const hb = await heartbeat(gw, id, { secret: wrong });
      assert.equal(hb.status, 403, `heartbeat with ${JSON.stringify(wrong)}: ${hb.text}`);
      assert.equal(hb.json.error.code, 'invalid_replica_secret');
    }
    assert.equal((await heartbeat(gw, id, { secret })).status, 200);
    const refused = await deregister(gw, id, { secret: 'nope' });
    assert.equal(refused.status, 403, refused.text);
    assert.ok(await replicaByUrl(gw, p.url), 'still registered');
    assert.equal((await deregister(gw, id, { secret })).status, 202);
    await waitForReplica(gw, p.url, (r) => r === undefined, { what: 'the deregistered replica removed' });
    assert.equal((await heartbeat(gw, id, { secret })).status, 404, 'then it is unknown');
  });

  test('a registered URL cannot be updated or moved without its secret; with it, it can', async () => {
    const p = await phone('p2');
    const first = await register(gw, agentBody(p.url));
    assert.equal(first.status, 200, first.text);
    const { id, secret } = first.json;
    const facts = (r) => JSON.stringify([r.id, r.model, r.slots, r.source, r.agent_version]);
    const before = facts(await replicaByUrl(gw, p.url));
    const cases = [
      ['update without the secret', agentBody(p.url, 'm', { slots: 4 }), undefined],
      ['update with a wrong secret', agentBody(p.url, 'm', { slots: 4 }), 'f'.repeat(64)],
      ['move without the secret', agentBody(p.url, 'other'), undefined],
      ['move with a wrong secret', agentBody(p.url, 'other'), 'f'.repeat(64)],
    ];
    for (const [what, body, s] of cases) {
      const res = await register(gw, body, { secret: s });
      assert.equal(res.status, 409, `${what}: ${res.text}`);
      assert.equal(res.json.error.code, 'url_registered', what);
      assert.ok(!('secret' in res.json), what);
    }
    assert.equal(facts(await replicaByUrl(gw, p.url)), before, 'a refused registration changes nothing');

    const update = await register(gw, agentBody(p.url, 'm', { slots: 4 }), { secret });
    assert.equal(update.status, 200, update.text);
    assert.equal(update.json.id, id, 'an update keeps the id');
    assert.equal(update.json.secret, secret, 'and the secret');
    assert.equal((await replicaByUrl(gw, p.url)).slots, 4);

    const moved = await register(gw, agentBody(p.url, 'other'), { secret });
    assert.equal(moved.status, 200, moved.text);
    assert.notEqual(moved.json.id, id, 'a move makes a new entry');
    assert.equal(moved.json.secret, secret, 'under the same secret');
    await eventually(async () => (await replicas(gw)).filter((r) => r.url === p.url).length === 1, { what: 'one entry' });
    assert.equal((await replicaByUrl(gw, p.url)).model, 'other');
    assert.equal((await heartbeat(gw, id, { secret })).status, 404, 'the old id is gone');
    assert.equal((await heartbeat(gw, moved.json.id, { secret })).status, 200);
    // Leave model "other" empty for the next tests.
    assert.equal((await admin(gw, 'DELETE', `/admin/v1/replicas/${moved.json.id}`)).status, 202);
    await waitForReplica(gw, p.url, (r) => r === undefined, { what: 'removed' });
  });

  test('the admin token frees a URL: DELETE, then anyone may register it', async () => {
    const p = await phone('p3');
    const first = await register(gw, agentBody(p.url));
    assert.equal(first.status, 200, first.text);
    assert.equal((await register(gw, agentBody(p.url))).status, 409);
    assert.equal((await admin(gw, 'DELETE', `/admin/v1/replicas/${first.json.id}`)).status, 202);
    const again = await register(gw, agentBody(p.url));
    assert.equal(again.status, 200, again.text);
    assert.notEqual(again.json.secret, first.json.secret, 'a new registration, a new secret');
  });

  test('a static endpoint keeps its model, and a registration never raises its slots', async () => {
    const elsewhere = await register(gw, agentBody(fixed.url, 'other'));
    assert.equal(elsewhere.status, 409, elsewhere.text);
    assert.equal(elsewhere.json.error.code, 'url_in_use');
    const more = await register(gw, agentBody(fixed.url, 'm', { slots: 8 }));
    assert.equal(more.status, 200, more.text);
    assert.equal(more.json.slots, 2, 'capped at the 2 slots of the YAML');
    assert.equal(more.json.slots_capped, true);
    const entry = await replicaByUrl(gw, fixed.url);
    assert.equal(entry.source, 'config');
    assert.equal(entry.slots, 2);
    assert.equal(entry.registered, true);
    assert.equal((await heartbeat(gw, more.json.id, { secret: more.json.secret })).status, 200);
    assert.equal((await register(gw, agentBody(fixed.url))).status, 409, 'its registration is guarded too');
    // Deregistering takes the registration away; the static endpoint stays.
    assert.equal((await deregister(gw, more.json.id, { secret: more.json.secret })).status, 200);
    const after = await replicaByUrl(gw, fixed.url);
    assert.equal(after.source, 'config');
    assert.equal(after.registered, false);
  });
});

describe('allowed_urls wildcards', () => {
  let p;
  let gw;

  before(async () => {
    p = await startFakeReplica({ name: 'p' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      // Meant as "any host on port 80": the '*' must not swallow ":<port>".
      registration: { ...REGISTRATION, allowed_urls: ['http://*'] },
      health: FAST_HEALTH,
      models: [{ name: 'm', endpoints: [] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await stopChecked(gw);
    await p?.close();
  });

  test("'*' does not match ':' (nor '/', '@', '[', ']')", async () => {
    const res = await register(gw, agentBody(p.url));
    assert.equal(res.status, 403, res.text);
    assert.equal(res.json.error.code, 'url_not_allowed');
    const v6 = await register(gw, agentBody('http://[::1]'));
    assert.equal(v6.status, 403, v6.text);
    assert.equal((await replicas(gw)).length, 0);
  });
});

describe('a registration that missed its heartbeats', () => {
  const fakes = [];
  let gw;

  before(async () => {
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { ...REGISTRATION, heartbeat_interval: '300ms', expire_after: '60s' },
      health: FAST_HEALTH,
      models: [{ name: 'm', endpoints: [] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await stopChecked(gw);
    for (const f of fakes) {
      await f.close();
    }
  });

  test('may be registered again without its secret (new id, new secret)', async () => {
    const p = await startFakeReplica({ name: 'p' });
    fakes.push(p);
    const first = await register(gw, agentBody(p.url));
    assert.equal(first.status, 200, first.text);
    const refused = await register(gw, agentBody(p.url));
    assert.equal(refused.status, 409, 'fresh: it is guarded');
    await waitForStateLog(gw, first.json.id, 'unhealthy', { timeoutMs: 5000 });
    const taken = await register(gw, agentBody(p.url));
    assert.equal(taken.status, 200, taken.text);
    assert.notEqual(taken.json.id, first.json.id);
    assert.notEqual(taken.json.secret, first.json.secret);
    const log = await gw.waitForLog((l) => l.msg === 'registration taken over: the previous one missed its heartbeats');
    assert.equal(log.previous, first.json.id);
    assert.equal((await heartbeat(gw, first.json.id, { secret: first.json.secret })).status, 404);
    assert.equal((await heartbeat(gw, taken.json.id, { secret: taken.json.secret })).status, 200);
  });
});

describe('an agent that restarts without its secret', () => {
  let gw;
  let agent;

  before(async () => {
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { ...REGISTRATION, heartbeat_interval: '300ms', expire_after: '60s' },
      health: FAST_HEALTH,
      models: [{ name: 'm', endpoints: [] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    stopAgent(agent);
    await stopChecked(gw);
  });

  test('gets its URL back once the old registration missed its heartbeats', async (t) => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const args = ['--listen', `127.0.0.1:${port}`, '--model', 'm', '--public-url', url, '--gateway-url', gw.adminUrl,
      '--gateway-token-env', 'FG_IT_REGISTRATION_TOKEN', '--drain-timeout', '1'];
    agent = await startAgent(args, { env: TOKEN_ENV });
    const first = await waitForState(gw, url, 'healthy', { timeoutMs: 8000 });
    // A crash: no deregistration, the secret is lost with the process.
    process.kill(agent.proc.pid, 'SIGKILL');
    await agent.exited;
    const crashedAt = Date.now();
    agent = await startAgent(args, { env: TOKEN_ENV });
    await eventually(() => agent.logs.some((l) => l.msg === 'registered with the gateway'), {
      timeoutMs: 15000, what: 'the restarted agent registered',
    });
    t.diagnostic(`FIGURE re-registration after a restart: ${Date.now() - crashedAt} ms (heartbeat 300ms; ` +
      `${agent.logs.filter((l) => l.msg === 'registration failed').length} refused attempt(s) first)`);
    const entry = await waitForState(gw, url, 'healthy', { timeoutMs: 8000 });
    assert.notEqual(entry.id, first.id, 'a new registration');
    assert.equal((await replicas(gw)).filter((r) => r.url === url).length, 1, 'one entry for the URL');
    for (const l of agent.logs.filter((x) => x.msg === 'registration failed')) {
      assert.match(l.error, /HTTP 409/, 'only refused because the old registration held the URL');
      assert.equal(l.level, 'warn');
    }
    assert.ok(REGISTRATION_TOKEN);
  });
});

describe('a phone that serves another model', () => {
  let agentLike; // an agent's /health names its model
  let plain; // a plain OpenAI server, probed on /v1/models
  let llama; // llama-server's own /health names no model
  let good;
  let gw;

  before(async () => {
    agentLike = await startFakeReplica({ name: 'agent-like' });
    plain = await startFakeReplica({ name: 'plain', servedModels: ['qwen3.5-4b'] });
    llama = await startFakeReplica({ name: 'llama' });
    good = await startFakeReplica({ name: 'good' });
    setProbe(agentLike, { status: 200, body: { status: 'ok', model: 'qwen3.5-4b', slots_total: 1, slots_idle: 1 } });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [
        { name: 'm', endpoints: [agentLike.url, llama.url, good.url] },
        { name: 'p', health: { path: '/v1/models' }, endpoints: [plain.url] },
      ],
      routing: { queue_timeout: '10s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await stopChecked(gw);
    for (const f of [agentLike, plain, llama, good]) {
      await f?.close();
    }
  });

  test("an agent whose /health names another model is unhealthy with that reason", async () => {
    const r = await waitForState(gw, agentLike.url, 'unhealthy', { timeoutMs: 5000 });
    assert.equal(r.last_probe_error, 'serves model qwen3.5-4b, not m');
    assert.equal(r.model_check, 'mismatch');
    const change = await waitForStateLog(gw, r.id, 'unhealthy');
    assert.equal(change.reason, 'serves model qwen3.5-4b, not m');
    await gw.waitForLog((l) => l.msg === 'replica serves another model' && l.replica === r.id);
    for (let i = 0; i < 6; ++i) {
      assert.equal((await chat(gw, 'm')).status, 200);
    }
    assert.equal(served(agentLike).length, 0, 'no request reaches it');
    // It is fixed (the right model loaded): probes bring it back.
    setProbe(agentLike, { status: 200, body: { status: 'ok', model: 'm' } });
    const back = await waitForState(gw, agentLike.url, 'healthy', { timeoutMs: 5000 });
    assert.equal(back.model_check, 'verified');
    assert.equal(back.last_probe_error, null);
  });

  test("a plain server whose /v1/models lacks the model is unhealthy", async () => {
    const r = await waitForState(gw, plain.url, 'unhealthy', { timeoutMs: 5000 });
    assert.equal(r.last_probe_error, 'serves model qwen3.5-4b, not p');
    plain.servedModels = ['qwen3.5-4b', 'p'];
    assert.equal((await waitForState(gw, plain.url, 'healthy', { timeoutMs: 5000 })).model_check, 'verified');
  });

  test("a /health that names no model (llama-server's) passes on its status, shown as unverified", async () => {
    await eventually(() => llama.probes.length >= 3, { what: 'three probes' });
    const r = await replicaByUrl(gw, llama.url);
    assert.equal(r.state, 'healthy');
    assert.equal(r.model_check, 'unverified');
  });
});
