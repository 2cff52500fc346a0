// Reloads and the fleet (issue 11, item 12): SIGHUP reconciles `models[].local` (a changed count
// starts or stops agents, changed settings restart them, a removed model stops its agents; an agent
// being stopped finishes its in-flight request first), and a request in flight across a SIGHUP
// keeps the configuration it started with.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { alive } from './lib/agent.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, startGateway, stopChecked } from './lib/gateway.mjs';
import { chat, reload, replicas, rewriteConfig } from './lib/lifecycle_util.mjs';

const HEALTH = { interval: '200ms', timeout: '150ms', unhealthy_after: 3, healthy_after: 1, eject_after: 3 };

describe('reload reconciles local agents', () => {
  let gw;
  const config = (models) => ({ health: HEALTH, models, routing: { queue_timeout: '20s' } });
  const local = (count, extra = {}) => ({ count, engine: 'sim', profile: 'fast-test', time_scale: 1, ...extra });

  before(async () => {
    gw = await startGateway(config([{ name: 'm', local: local(2) }, { name: 'keep', local: local(1) }]));
  });

  after(async () => {
    await stopChecked(gw);
  });

  const locals = async (model) => (await replicas(gw)).filter((r) => r.source === 'local' && r.model === model);
  const started = (fromIndex = 0) => gw.logs.slice(fromIndex).filter((l) => l.msg === 'local agent started');
  const healthyLocals = (model, n) => eventually(async () => {
    const list = await locals(model);
    return list.length === n && list.every((r) => r.state === 'healthy');
  }, { timeoutMs: 10000, what: `${n} healthy local replicas of ${model}` });

  async function reloadTo(models) {
    rewriteConfig(gw, config(models));
    const outcome = await reload(gw);
    assert.equal(outcome.msg, 'configuration reloaded', JSON.stringify(outcome));
  }

  test('a higher count starts agents', async () => {
    await healthyLocals('m', 2);
    const mark = gw.logs.length;
    await reloadTo([{ name: 'm', local: local(3) }, { name: 'keep', local: local(1) }]);
    await healthyLocals('m', 3);
    assert.equal(started(mark).length, 1, 'one agent started, the others left alone');
  });

  test('a lower count stops agents once their in-flight requests are done', async () => {
    const before = await locals('m');
    assert.equal(before.length, 3);
    // One long request on each agent: fast-test reads 20,000 prompt tokens a second, so a
    // 60,000-token prompt (about 240,000 characters) keeps it busy for 3 s.
    const prompt = [{ role: 'user', content: 'y'.repeat(240000) }];
    const long = before.map((_, i) => chat(gw, 'm', { messages: prompt, i }, { timeoutMs: 20000 }));
    await eventually(async () => (await locals('m')).every((r) => r.in_flight === 1), { what: 'a request on each agent' });
    const pids = started().filter((l) => l.model === 'm').map((l) => l.pid);
    const mark = gw.logs.length;
    await reloadTo([{ name: 'm', local: local(1) }, { name: 'keep', local: local(1) }]);
    // Drained at once (no new requests), still there while their requests run.
    const draining = (await locals('m')).filter((r) => r.state === 'draining');
    assert.equal(draining.length, 2, JSON.stringify(await locals('m')));
    const answers = await Promise.all(long);
    assert.deepEqual(answers.map((a) => a.status), [200, 200, 200], 'no in-flight request was cut');
    await eventually(async () => (await locals('m')).length === 1, { what: 'one local replica left' });
    await eventually(() => gw.logs.slice(mark).filter((l) => l.msg === 'local agent stopped').length === 2, {
      what: 'two agents stopped',
    });
    assert.equal(pids.filter((pid) => alive(pid)).length, 1, 'two of the three processes are gone');
    assert.equal((await chat(gw, 'm')).status, 200);
  });

  test('changed settings restart the agents', async () => {
    const oldPids = started().filter((l) => l.model === 'm').map((l) => l.pid).filter((pid) => alive(pid));
    assert.equal(oldPids.length, 1);
    const mark = gw.logs.length;
    await reloadTo([{ name: 'm', local: local(1, { slots: 2 }) }, { name: 'keep', local: local(1) }]);
    await eventually(async () => {
      const list = await locals('m');
      return list.length === 1 && list[0].state === 'healthy' && list[0].slots === 2;
    }, { timeoutMs: 10000, what: 'the restarted agent healthy with 2 slots' });
    await eventually(() => !alive(oldPids[0]), { what: 'the old process gone' });
    assert.equal(started(mark).length, 1);
    assert.equal(started(mark)[0].model, 'm', "the other model's agent was left alone");
    assert.equal((await chat(gw, 'm')).status, 200);
  });

  test('a removed model stops its agents; the others stay', async () => {
    const mPids = started().filter((l) => l.model === 'm').map((l) => l.pid).filter((pid) => alive(pid));
    const keepPids = started().filter((l) => l.model === 'keep').map((l) => l.pid);
    await reloadTo([{ name: 'keep', local: local(1) }]);
    await eventually(() => mPids.every((pid) => !alive(pid)), { what: "model m's agents stopped" });
    assert.equal((await locals('m')).length, 0);
    assert.equal((await chat(gw, 'm')).status, 404);
    assert.ok(keepPids.every((pid) => alive(pid)));
    assert.equal((await chat(gw, 'keep')).status, 200);
  });
});

describe('a request in flight across a SIGHUP', () => {
  let phone;
  let gw;
  const config = (firstByteTimeout) => ({
    health: HEALTH,
    models: [{ name: 'm', slots: 4, endpoints: [phone.url] }],
    routing: { retries: 0 },
    upstream: { first_byte_timeout: firstByteTimeout },
  });

  before(async () => {
    phone = await startFakeReplica({ name: 'phone' });
    gw = await startGateway(config('30s'));
  });

  after(async () => {
    await stopChecked(gw);
    await phone?.close();
  });

  test('keeps the settings it started with', async () => {
    const old = chat(gw, 'm', { fake: { type: 'hold' }, n: 1 }, { timeoutMs: 20000 });
    await eventually(() => phone.holds.length === 1, { what: 'the first request held by the phone' });
    rewriteConfig(gw, config('300ms'));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    // A request that starts now runs on the new settings: it times out waiting for its head.
    const fresh = await chat(gw, 'm', { fake: { type: 'hold' }, n: 2 }, { timeoutMs: 20000 });
    assert.equal(fresh.status, 504, fresh.text);
    // The first one, older than the new 300 ms, is still waiting on its own 30 s.
    assert.equal(phone.inFlight >= 1, true);
    phone.release(1);
    const answer = await old;
    assert.equal(answer.status, 200, answer.text);
  });
});
