// Fleet lifecycle, agent registration: a phone registering with the right token joins, is proven by
// probes and then receives traffic (the time from registration to the first routed request is
// printed); a bad or missing token, a URL outside allowed_urls, an unknown model and a malformed
// body are refused and add nothing (a rogue replica never sees a request or a probe);
// re-registration with the replica's secret keeps one entry (also right after a model change, and
// never by taking over a static endpoint); a loading model keeps a replica joining; an agent's
// slots_total sets the
// capacity but never the in-flight count; a replica that stops sending heartbeats goes unhealthy
// (and stays out of rotation), then is removed, without cutting its in-flight request.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, startGateway } from './lib/gateway.mjs';
import {
  ADMIN_TOKEN, FAST_HEALTH, Load, REGISTRATION_TOKEN, TOKEN_ENV, admin, chat, figure, fleet, heartbeat, register,
  replicaByUrl, replicas, served, setProbe, stateChanges, waitForState, waitForStateLog,
} from './lib/lifecycle_util.mjs';

const REGISTRATION = {
  token_env: 'FG_IT_REGISTRATION_TOKEN',
  allowed_urls: ['http://127.0.0.1:*'],
  expire_after: '60s',
  heartbeat_interval: '10s',
};

const agentBody = (fake, model = 'm', extra = {}) => ({
  url: fake.url,
  model,
  slots: 1,
  agent_version: '0.1.0-it',
  device: { model: 'Pixel 8', soc: 'Tensor G3', ram_gb: 8 },
  ...extra,
});

// The replica list reduced to what must not change when a registration is refused.
const snapshot = async (gw) => (await replicas(gw)).map((r) => `${r.id} ${r.model} ${r.url} ${r.source}`).sort();

describe('agent registration', () => {
  let fixed; // the static replica of model m
  const extra = []; // fakes started by the tests
  let gw;

  before(async () => {
    fixed = await startFakeReplica({ name: 'fixed', mode: { delayMs: 20 } });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [
        { name: 'm', replicas: 3, endpoints: [fixed.url] },
        { name: 'other', endpoints: [] },
      ],
      routing: { queue_timeout: '10s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of [fixed, ...extra]) {
      await f.close();
    }
  });

  async function fake(name, mode = { delayMs: 20 }) {
    const f = await startFakeReplica({ name, mode });
    extra.push(f);
    return f;
  }

  test('a phone with the right token joins, is proven by probes, then receives traffic', async (t) => {
    const phone = await fake('phone1');
    // The agent's /health reports 2 slots: the gateway takes that as the replica's capacity.
    setProbe(phone, { status: 200, body: { status: 'ok', slots_total: 2, slots_idle: 2 } });
    const load = new Load(gw, 'm', { concurrency: 3 }).start();
    let registeredAt;
    let id;
    let registration;
    try {
      await load.waitForMore(5);
      const logMark = gw.logs.length;
      registeredAt = Date.now();
      const res = await register(gw, agentBody(phone));
      assert.equal(res.status, 200, res.text);
      assert.match(res.json.id, /^r\d+$/);
      assert.equal(res.json.heartbeat_interval_s, 10);
      id = res.json.id;
      registration = res.json;
      const entry = await replicaByUrl(gw, phone.url);
      assert.equal(entry.id, id);
      assert.equal(entry.model, 'm');
      assert.equal(entry.source, 'registration');
      assert.ok(['joining', 'healthy'].includes(entry.state), `a registered replica starts joining (${entry.state})`);
      assert.equal(entry.agent_version, '0.1.0-it');
      assert.deepEqual(entry.device, agentBody(phone).device);
      const added = await gw.waitForLog((l) => l.msg === 'replica added' && l.replica === id);
      assert.equal(added.state, 'joining');
      assert.equal(added.source, 'registration');

      const healthy = await waitForStateLog(gw, id, 'healthy', { fromIndex: logMark, timeoutMs: 5000 });
      const healthyAt = Date.now();
      assert.equal(healthy.from, 'joining');
      await eventually(() => served(phone).length > 0, { timeoutMs: 5000, what: 'a request routed to the registered phone' });
      const routedAt = Date.now();
      figure(t, 'time from registration to healthy (interval 500ms, healthy_after 2)', `${healthyAt - registeredAt} ms`);
      figure(t, 'time from registration to the first routed request', `${routedAt - registeredAt} ms`);
      await load.waitForMore(20);
      assert.equal((await replicaByUrl(gw, phone.url)).slots, 2, 'slots_total from the probe body sets the slots');
    } finally {
      await load.stop();
    }
    assert.deepEqual(load.failures, []);
    const m = await fleet(gw, 'm');
    assert.equal(m.registered, 2);
    assert.equal(m.healthy, 2);
    assert.equal(m.degraded, true, '2 healthy of 3 desired');
    assert.equal((await heartbeat(gw, id, { secret: registration.secret })).status, 200, 'heartbeat accepted');
  });

  test('re-registering the same URL with its secret keeps one entry with the same id', async () => {
    const phone = await fake('phone2');
    const first = await register(gw, agentBody(phone));
    assert.equal(first.status, 200, first.text);
    const { secret } = first.json;
    assert.equal((await register(gw, agentBody(phone, 'm', { slots: 3 }))).status, 409, 'not without its secret');
    const again = await register(gw, agentBody(phone, 'm', { slots: 3, agent_version: '0.1.1-it' }), { secret });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.id, first.json.id, 'same id');
    // The same URL written differently (trailing slash) is the same replica.
    const slash = await register(gw, agentBody(phone, 'm', { url: `${phone.url}/`, slots: 3, agent_version: '0.1.1-it' }), { secret });
    assert.equal(slash.status, 200, slash.text);
    assert.equal(slash.json.id, first.json.id, 'same id for the normalised URL');
    const entries = (await replicas(gw)).filter((r) => r.url === phone.url);
    assert.equal(entries.length, 1, 'no duplicate');
    assert.equal(entries[0].slots, 3, 'the entry is updated');
    assert.equal(entries[0].agent_version, '0.1.1-it');
    assert.equal(gw.logs.filter((l) => l.msg === 'replica added' && l.url === phone.url).length, 1, 'added once');
  });

  test('the same phone registering for another model moves there (one entry)', async () => {
    const phone = await fake('mover');
    const first = await register(gw, agentBody(phone, 'm'));
    assert.equal(first.status, 200, first.text);
    const second = await register(gw, agentBody(phone, 'other'), { secret: first.json.secret });
    assert.equal(second.status, 200, second.text);
    await eventually(async () => (await replicas(gw)).filter((r) => r.url === phone.url).length === 1, {
      timeoutMs: 3000,
      what: 'one entry for the phone',
    });
    const entry = await replicaByUrl(gw, phone.url);
    assert.equal(entry.model, 'other');
    assert.equal(entry.id, second.json.id);
    await waitForState(gw, phone.url, 'healthy', { timeoutMs: 5000 });
    assert.equal((await chat(gw, 'other')).status, 200);
    assert.equal(served(phone).length, 1, 'it serves its new model');
    // Leave model "other" empty again for the next tests.
    assert.equal((await admin(gw, 'DELETE', `/admin/v1/replicas/${entry.id}`)).status, 202);
    await eventually(async () => (await replicaByUrl(gw, phone.url)) === undefined, { timeoutMs: 3000, what: 'mover removed' });
  });

  test('bad token, disallowed URL, unknown model and bad body are refused and add nothing', async () => {
    const rogue = await fake('rogue');
    const before = await snapshot(gw);
    const cases = [
      ['no token', register(gw, agentBody(rogue), { token: null }), 401],
      ['wrong token', register(gw, agentBody(rogue), { token: 'not-the-token' }), 401],
      ['the admin token', register(gw, agentBody(rogue), { token: ADMIN_TOKEN }), 401],
      ['token with a suffix', register(gw, agentBody(rogue), { token: `${REGISTRATION_TOKEN}x` }), 401],
      ['URL on another host', register(gw, agentBody(rogue, 'm', { url: `http://127.0.0.2:${rogue.port}` })), 403],
      ['https URL', register(gw, agentBody(rogue, 'm', { url: `https://127.0.0.1:${rogue.port}` })), 403],
      ['URL with a path prefix', register(gw, agentBody(rogue, 'm', { url: `${rogue.url}/v1` })), 403],
      ['unknown model', register(gw, agentBody(rogue, 'no-such-model')), 404],
      ['body not JSON', register(gw, '{"url": nope'), 400],
      ['no url', register(gw, { model: 'm' }), 400],
      ['no model', register(gw, { url: rogue.url }), 400],
      ['bad url', register(gw, { url: 'ftp://127.0.0.1:21', model: 'm' }), 400],
      ['slots 0', register(gw, agentBody(rogue, 'm', { slots: 0 })), 400],
    ];
    for (const [what, pending, status] of cases) {
      const res = await pending;
      assert.equal(res.status, status, `${what}: ${res.text}`);
      assert.ok(res.json?.error?.message, `${what}: an error body`);
      assert.ok(!('id' in (res.json ?? {})), `${what}: no id handed out`);
    }
    // Heartbeats need the token too, and an id that exists.
    assert.equal((await heartbeat(gw, 'r1', { token: null })).status, 401);
    assert.equal((await heartbeat(gw, 'r1', { token: 'nope' })).status, 401);
    assert.equal((await heartbeat(gw, 'r999')).status, 404);
    assert.equal((await heartbeat(gw, 'r1')).status, 404, 'a static replica takes no heartbeat');

    // Nothing was added, and the rogue never saw a probe or a prompt (3 probe rounds later).
    const probes = fixed.probes.length;
    await eventually(() => fixed.probes.length >= probes + 3, { what: 'three more probe rounds' });
    for (let i = 0; i < 5; ++i) {
      assert.equal((await chat(gw, 'm', { secret: 'user prompt' })).status, 200);
    }
    assert.deepEqual(await snapshot(gw), before, 'the replica list is unchanged');
    assert.equal(rogue.requests.length, 0, 'no request reached the rogue replica');
    assert.equal(rogue.probes.length, 0, 'not even a probe');
    assert.equal(gw.logs.filter((l) => l.msg === 'replica added' && l.url === rogue.url).length, 0);
    assert.ok(gw.logs.some((l) => /registration refused/.test(l.msg ?? '')), 'refusals are logged');
  });

  test('a replica whose model is still loading stays joining (not unhealthy) and joins when loaded', async () => {
    const phone = await fake('loading');
    setProbe(phone, { status: 503, body: { error: { message: 'Loading model', type: 'unavailable_error', code: 503 } } });
    const logMark = gw.logs.length;
    const res = await register(gw, agentBody(phone, 'other'));
    assert.equal(res.status, 200, res.text);
    const id = res.json.id;
    await eventually(() => phone.probes.length >= 5, { what: 'five probes answered "loading"' });
    assert.equal((await replicaByUrl(gw, phone.url)).state, 'joining');
    assert.deepEqual(stateChanges(gw, id).filter((l) => gw.logs.indexOf(l) >= logMark), [], 'loading is not a failure');
    // Requests for the model wait in the queue meanwhile.
    const pending = chat(gw, 'other');
    await eventually(async () => (await fleet(gw, 'other')).queue_depth === 1, { what: 'the request queued' });
    assert.equal(served(phone).length, 0);
    setProbe(phone, { status: 200, body: { status: 'ok' } });
    await waitForState(gw, phone.url, 'healthy', { timeoutMs: 5000 });
    const answer = await pending;
    assert.equal(answer.status, 200, 'the queued request is served once the phone is ready');
    assert.equal(served(phone).length, 1);
  });
});

describe('registration and the one-entry-per-URL rule', () => {
  let fixed; // a static endpoint of model m
  let phone;
  let gw;

  before(async () => {
    fixed = await startFakeReplica({ name: 'fixed', mode: { delayMs: 10 } });
    phone = await startFakeReplica({ name: 'phone', mode: { delayMs: 10 } });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [
        { name: 'm', endpoints: [fixed.url] },
        { name: 'other', endpoints: [] },
      ],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    await fixed?.close();
    await phone?.close();
  });

  const entriesOf = async (url) => (await replicas(gw)).filter((r) => r.url === url);
  const listing = async () => JSON.stringify((await replicas(gw)).map((r) => [r.id, r.model, r.url, r.state, r.source]));

  test('an agent repeating its registration right after changing model still gets one entry', async () => {
    const first = await register(gw, agentBody(phone, 'm'));
    assert.equal(first.status, 200);
    const { secret } = first.json;
    const moved = await register(gw, agentBody(phone, 'other'), { secret });
    assert.equal(moved.status, 200, moved.text);
    // The agent did not see the answer (network blip) and registers again.
    const repeat = await register(gw, agentBody(phone, 'other'), { secret });
    assert.equal(repeat.status, 200, repeat.text);
    assert.equal(repeat.json.id, moved.json.id, `the repeat gets the same id; replicas: ${await listing()}`);
    await gw.waitForLog((l) => l.msg === 'replica removed' && l.replica === first.json.id, { what: 'the old entry removed' });
    const entries = await entriesOf(phone.url);
    assert.equal(entries.length, 1, `one entry per URL, or the phone's slots count twice; replicas: ${await listing()}`);
    assert.equal(entries[0].model, 'other');
  });

  test('registering the URL of a static endpoint does not hand out an id that refuses heartbeats', async () => {
    const same = await register(gw, agentBody(fixed, 'm'));
    assert.equal(same.status, 200, same.text);
    assert.equal((await heartbeat(gw, same.json.id, { secret: same.json.secret })).status, 200,
      `the id handed out (${same.json.id}) must accept heartbeats, or the agent re-registers forever`);
    assert.deepEqual((await entriesOf(fixed.url)).map((r) => [r.model, r.source]), [['m', 'config']]);
  });

  test('a registration cannot take a static endpoint away from its model', async () => {
    const other = await register(gw, agentBody(fixed, 'other'));
    assert.equal(other.status, 409, other.text);
    assert.equal(other.json.error.code, 'url_in_use');
    const entries = await entriesOf(fixed.url);
    assert.deepEqual(entries.map((r) => [r.model, r.source, r.state]), [['m', 'config', 'healthy']],
      `the static endpoint stays in model m as configured; replicas: ${await listing()}`);
    assert.equal((await chat(gw, 'm', {}, { timeoutMs: 5000 })).status, 200, 'model m still served');
  });
});

describe('slot reports from an agent', () => {
  let phone;
  let gw;

  before(async () => {
    phone = await startFakeReplica({ name: 'phone', mode: { delayMs: 10 } });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [{ name: 's', endpoints: [] }],
      routing: { queue_timeout: '10s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    await phone?.close();
  });

  test("slots_total sets the capacity; the gateway's own in-flight count stays authoritative", async () => {
    // The agent says 3 slots, none idle (it cannot know what this gateway has in flight).
    setProbe(phone, { status: 200, body: { status: 'ok', slots_total: 3, slots_idle: 0 } });
    const res = await register(gw, agentBody(phone, 's', { slots: 1 }));
    assert.equal(res.status, 200, res.text);
    await waitForState(gw, phone.url, 'healthy', { timeoutMs: 5000 });
    await eventually(async () => (await replicaByUrl(gw, phone.url)).slots === 3, { what: 'slots 3 from the probe' });
    const held = [1, 2, 3].map((i) => chat(gw, 's', { fake: { type: 'hold' }, i }));
    await eventually(() => phone.inFlight === 3, { what: '3 requests in flight (slots_idle 0 is not obeyed over our count)' });
    assert.equal((await replicaByUrl(gw, phone.url)).in_flight, 3);

    // The phone now reports 1 slot while 3 requests run: nothing new until in-flight drops below 1.
    setProbe(phone, { status: 200, body: { status: 'ok', slots_total: 1, slots_idle: 0 } });
    await eventually(async () => (await replicaByUrl(gw, phone.url)).slots === 1, { what: 'slots 1 from the probe' });
    const fourth = chat(gw, 's', { n: 4 });
    await eventually(async () => (await fleet(gw, 's')).queue_depth === 1, { what: 'the 4th request queued' });
    assert.equal(phone.inFlight, 3);
    assert.equal((await replicaByUrl(gw, phone.url)).in_flight, 3, 'a report never overwrites the in-flight count');
    phone.release();
    assert.deepEqual((await Promise.all([...held, fourth])).map((r) => r.status), [200, 200, 200, 200]);
    assert.equal(phone.maxInFlight, 3);
  });
});

describe('heartbeat expiry', () => {
  let fixed;
  const phones = [];
  const heartbeats = []; // stop functions of the heartbeat loops
  let gw;

  before(async () => {
    fixed = await startFakeReplica({ name: 'fixed', mode: { delayMs: 10 } });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { ...REGISTRATION, heartbeat_interval: '300ms', expire_after: '2s' },
      health: FAST_HEALTH,
      models: [{ name: 'm', endpoints: [fixed.url] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    for (const stop of heartbeats) {
      await stop().catch(() => {});
    }
    await gw?.stop();
    for (const f of [fixed, ...phones]) {
      await f.close();
    }
  });

  // Registers a new phone and heartbeats every 100 ms until it is healthy and has served a
  // request; returns {phone, id, stop()} where stop() ends the heartbeats (resolves at the last).
  async function beatingPhone(name) {
    const phone = await startFakeReplica({ name, mode: { delayMs: 10 } });
    phones.push(phone);
    const res = await register(gw, agentBody(phone));
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.heartbeat_interval_s, 0.3);
    const { id, secret } = res.json;
    let beating = true;
    let count = 0;
    let lastSentAt = null;
    const beats = (async () => {
      while (beating) {
        lastSentAt = Date.now();
        assert.equal((await heartbeat(gw, id, { secret })).status, 200);
        ++count;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    })();
    const stop = async () => {
      beating = false;
      await beats;
    };
    heartbeats.push(stop);
    await waitForState(gw, phone.url, 'healthy', { timeoutMs: 5000 });
    return { phone, id, secret, stop, beats: () => count, lastSentAt: () => lastSentAt };
  }

  test('a replica that stops sending heartbeats goes unhealthy, then is removed', async (t) => {
    const { phone, id, stop, beats, lastSentAt } = await beatingPhone('phone1');
    // Heartbeats for 4 intervals (12 beats 100 ms apart) keep it healthy.
    const from = beats();
    await eventually(() => beats() >= from + 12, { what: '12 more heartbeats' });
    assert.equal((await replicaByUrl(gw, phone.url)).state, 'healthy');
    assert.equal(stateChanges(gw, id).filter((l) => l.to === 'unhealthy').length, 0);
    const logMark = gw.logs.length;
    await stop();
    const stoppedAt = Date.now();
    const down = await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 5000 });
    const downAt = Date.now();
    assert.match(down.reason, /heartbeat/);
    await gw.waitForLog((l) => l.msg === 'replica removed' && l.replica === id, { timeoutMs: 5000 });
    const removedAt = Date.now();
    figure(t, 'time from the last heartbeat to unhealthy (interval 300ms, 3 missed)', `${downAt - stoppedAt} ms`);
    figure(t, 'time from the last heartbeat to removal (expire_after 2s)', `${removedAt - stoppedAt} ms`);
    // A lower bound that load cannot break: the gateway received the last heartbeat after it was
    // sent, and removes the replica expire_after (2 s) after that at the earliest.
    assert.ok(removedAt - lastSentAt() >= 1990, `not removed before expire_after: ${removedAt - lastSentAt()} ms`);
    assert.equal(await replicaByUrl(gw, phone.url), undefined, 'gone from the replica list');
    assert.equal(stateChanges(gw, id).at(-1).to, 'gone');
    const before = served(phone).length;
    for (let i = 0; i < 6; ++i) {
      assert.equal((await chat(gw, 'm')).status, 200);
    }
    assert.equal(served(phone).length, before, 'no request after its removal');
    assert.equal((await heartbeat(gw, id, { secret: 'any' })).status, 404, 'a late heartbeat is told to register again');
    // Registering again brings it back as a new joining replica.
    const again = await register(gw, agentBody(phone));
    assert.equal(again.status, 200, again.text);
    assert.equal((await replicaByUrl(gw, phone.url)).state, 'joining');
    await waitForState(gw, phone.url, 'healthy', { timeoutMs: 5000 });
  });

  test('while its heartbeats are missing a replica stays out of rotation (passing probes do not bring it back)', async () => {
    const { phone, id, stop } = await beatingPhone('phone2');
    const load = new Load(gw, 'm', { concurrency: 2 }).start();
    try {
      await eventually(() => served(phone).length > 0, { what: 'traffic on the phone' });
      const logMark = gw.logs.length;
      await stop();
      await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 5000 });
      await eventually(() => phone.inFlight === 0, { what: 'requests bound just before finished' });
      const count = served(phone).length;
      await gw.waitForLog((l) => l.msg === 'replica removed' && l.replica === id, { timeoutMs: 5000 });
      const changes = stateChanges(gw, id).map((l) => `${l.from}->${l.to} (${l.reason})`).join(', ');
      assert.equal(served(phone).length, count,
        `no request reached it after it went unhealthy for missed heartbeats; state changes: ${changes}`);
      assert.deepEqual(stateChanges(gw, id).map((l) => `${l.from}->${l.to}`),
        ['joining->healthy', 'healthy->unhealthy', 'unhealthy->gone'], changes);
    } finally {
      await load.stop();
    }
    assert.deepEqual(load.failures, []);
  });

  test('a registered replica that expires mid-request lets the request finish', async () => {
    const { phone, id, stop } = await beatingPhone('phone3');
    // Keep the fixed replica busy so that the held request lands on the phone.
    const busy = chat(gw, 'm', { fake: { type: 'hold' } });
    await eventually(() => fixed.inFlight === 1 || phone.inFlight === 1, { what: 'first held request' });
    const held = chat(gw, 'm', { fake: { type: 'hold' } });
    await eventually(() => fixed.inFlight === 1 && phone.inFlight === 1, { what: 'a held request on each' });
    await stop();
    await gw.waitForLog((l) => l.msg === 'replica removed' && l.replica === id, { timeoutMs: 5000 });
    phone.release();
    fixed.release();
    const answers = await Promise.all([busy, held]);
    assert.deepEqual(answers.map((a) => a.status), [200, 200], 'the in-flight request was not cut by the expiry');
    assert.equal(served(phone).filter((r) => r.closedEarly).length, 0);
  });
});
