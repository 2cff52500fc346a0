// Fleet lifecycle, SIGHUP: endpoints added and removed under a steady load with no request lost
// (every request sent gets exactly one 200, and each reached exactly one replica once); the new
// replica receives traffic and the removed one none after its removal; an in-flight request on a
// removed endpoint finishes and queued requests are served by the new one; slots and models change
// on reload (no stale gauges left for a removed model); an invalid file is refused (log line) and the
// gateway keeps serving on the old one; an endpoint moved to another model, or listed again while
// its removal is pending, ends up in the fleet as configured.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, metricValue, request, startGateway } from './lib/gateway.mjs';
import {
  FAST_HEALTH, Load, TOKEN_ENV, chat, figure, fleet, reload, replicaByUrl, replicas, rewriteConfig, served,
} from './lib/lifecycle_util.mjs';

describe('SIGHUP reload', () => {
  let a; let b; let c; // model m: a and b at first; the reload adds c and removes a
  let q1; let q2; // model q: q1 at first, replaced by q2
  let n1; // model n: added, then removed
  const fakes = [];
  let gw;

  // The configuration with the given endpoints; everything else stays the same.
  const config = ({ m, q, extraModels = [] }) => ({
    admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
    health: FAST_HEALTH,
    models: [
      { name: 'm', slots: 1, endpoints: m },
      { name: 'q', slots: 1, endpoints: q },
      ...extraModels,
    ],
    // No retries: a request the reload broke would reach the client instead of being hidden.
    routing: { retries: 0, queue_timeout: '15s' },
  });

  before(async () => {
    for (const name of ['a', 'b', 'c', 'q1', 'q2', 'n1']) {
      fakes.push(await startFakeReplica({ name, mode: { delayMs: 25 } }));
    }
    [a, b, c, q1, q2, n1] = fakes;
    gw = await startGateway(config({ m: [a.url, b.url], q: [q1.url] }), { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of fakes) {
      await f.close();
    }
  });

  test('adds and removes endpoints under load with no request lost', async (t) => {
    // 6 clients on 2 one-slot replicas: about 4 requests queued at any time, 2 in flight.
    const load = new Load(gw, 'm', { concurrency: 6 }).start();
    let aAtRemoval;
    try {
      await load.waitForMore(30);
      const depth = (await fleet(gw, 'm')).queue_depth;
      t.diagnostic(`queue depth just before the reload: ${depth}`);
      assert.equal(served(c).length, 0);
      const aId = (await replicaByUrl(gw, a.url)).id;

      rewriteConfig(gw, config({ m: [b.url, c.url], q: [q1.url] }));
      const hupAt = Date.now();
      const outcome = await reload(gw);
      assert.equal(outcome.msg, 'configuration reloaded', JSON.stringify(outcome));
      await eventually(() => served(c).length > 0, { timeoutMs: 5000, what: 'traffic on the added replica' });
      figure(t, 'time from SIGHUP to the first request on an added endpoint', `${Date.now() - hupAt} ms`);

      await gw.waitForLog((l) => l.msg === 'replica removed' && l.replica === aId, { timeoutMs: 5000 });
      aAtRemoval = served(a).length;
      figure(t, 'time from SIGHUP to the removal of an endpoint (after its in-flight request)', `${Date.now() - hupAt} ms`);
      assert.equal(await replicaByUrl(gw, a.url), undefined, 'the removed endpoint left the list');
      const cId = (await replicaByUrl(gw, c.url)).id;
      assert.ok(cId, 'the added endpoint is listed');
      await load.waitForMore(60);
      assert.ok(served(c).length >= 20, `the added replica takes its share (${served(c).length})`);
    } finally {
      await load.stop();
    }
    assert.equal(served(a).length, aAtRemoval, 'the removed replica received nothing after its removal');
    const bad = load.failures;
    assert.deepEqual(bad, [], `every request succeeded (${bad.length} of ${load.results.length} failed)`);
    assert.equal(load.results.length, load.sent, 'every request sent got an answer');
    assert.equal(new Set(load.results.map((r) => r.n)).size, load.sent, 'exactly one answer per request');
    // Each request reached exactly one replica once (no loss, no duplicate).
    const upstream = [a, b, c].flatMap((f) => served(f)).filter((r) => r.json?.load_n !== undefined);
    assert.equal(upstream.length, load.sent, 'one upstream request per client request');
    assert.equal(new Set(upstream.map((r) => r.json.load_n)).size, load.sent);
    t.diagnostic(`requests: ${load.sent} sent, ${load.ok} ok; a ${served(a).length}, b ${served(b).length}, c ${served(c).length}`);
  });

  test('an in-flight request on a removed endpoint finishes; queued requests go to the new one', async () => {
    const held = chat(gw, 'q', { fake: { type: 'hold' } });
    await eventually(() => q1.inFlight === 1, { what: 'the held request on q1' });
    const queued = [1, 2, 3].map((i) => chat(gw, 'q', { i }));
    await eventually(async () => (await fleet(gw, 'q')).queue_depth === 3, { what: 'three queued requests' });

    rewriteConfig(gw, config({ m: [b.url, c.url], q: [q2.url] }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    const answers = await Promise.all(queued);
    assert.deepEqual(answers.map((r) => r.status), [200, 200, 200], 'the queued requests are served');
    assert.equal(served(q2).length, 3, 'by the new endpoint');
    const r = await replicaByUrl(gw, q1.url);
    assert.equal(r?.state, 'draining', 'the removed endpoint drains while its request runs');
    q1.release();
    assert.equal((await held).status, 200, 'the in-flight request finished');
    assert.equal(served(q1).filter((x) => x.closedEarly).length, 0);
    await eventually(async () => (await replicaByUrl(gw, q1.url)) === undefined, { timeoutMs: 3000, what: 'q1 removed' });
  });

  test('slots and models change on reload', async () => {
    rewriteConfig(gw, config({
      m: [b.url, { url: c.url, slots: 3 }],
      q: [q2.url],
      extraModels: [{ name: 'n', endpoints: [n1.url] }],
    }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    assert.equal((await replicaByUrl(gw, c.url)).slots, 3, 'slots changed in place');
    assert.equal((await replicaByUrl(gw, c.url)).state, 'healthy', 'a changed endpoint is not restarted');
    const res = await chat(gw, 'n');
    assert.equal(res.status, 200, res.text);
    assert.equal(served(n1).length, 1, 'the added model is served');
    const models = await request(`${gw.publicUrl}/v1/models`);
    assert.ok(models.json.data.some((x) => x.id === 'n'), '/v1/models lists the added model');
    assert.ok((await fleet(gw)).some((x) => x.model === 'n'));
    assert.equal(metricValue(await gw.metrics(), 'fleetgate_replicas', { model: 'n', state: 'healthy' }), 1, 'scraped while n exists');

    rewriteConfig(gw, config({ m: [b.url, { url: c.url, slots: 3 }], q: [q2.url] }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    const gone = await chat(gw, 'n');
    assert.equal(gone.status, 404, `a removed model is unknown: ${gone.text}`);
    assert.equal(served(n1).length, 1);
    assert.ok(!(await request(`${gw.publicUrl}/v1/models`)).json.data.some((x) => x.id === 'n'));
    await eventually(async () => (await replicaByUrl(gw, n1.url)) === undefined, { timeoutMs: 3000, what: 'n1 removed' });
  });

  test('a model removed by a reload leaves no stale series in /metrics', async () => {
    // Model n was added and removed by the previous test.
    assert.equal(await replicaByUrl(gw, n1.url), undefined);
    const stale = (await gw.metrics()).split('\n').filter((l) => /^fleetgate_(replicas|replicas_desired|model_degraded|slots)\{[^}]*model="n"/.test(l));
    // A gauge still saying "1 healthy replica" for a model that no longer exists misleads alerts.
    assert.deepEqual(stale.filter((l) => !/ 0$/.test(l)), [], 'no non-zero gauge for the removed model');
  });

  test('an invalid file is refused with a log line and the gateway keeps serving the old configuration', async () => {
    const before = (await replicas(gw)).map((r) => `${r.id} ${r.url} ${r.slots}`).sort();
    const load = new Load(gw, 'm', { concurrency: 3 }).start();
    try {
      await load.waitForMore(10);
      const broken = [
        'models:\n  - name: "m"\n    endpoints: [unclosed\n', // YAML syntax
        `models:\n  - name: m\n    endpoint: ["${a.url}"]\n`, // unknown key
        'models: []\n', // no model
        `health: {interval: 100ms, timeout: 200ms}\nmodels:\n  - name: m\n    endpoints: ["${a.url}"]\n`, // timeout >= interval
        '', // empty file
      ];
      for (const text of broken) {
        rewriteConfig(gw, text);
        const outcome = await reload(gw);
        assert.match(outcome.msg, /^reload refused/, `refused: ${JSON.stringify(outcome)} for ${JSON.stringify(text)}`);
        assert.equal(outcome.level, 'error');
        assert.ok(gw.running, 'still running');
        await load.waitForMore(5);
      }
      const refusal = gw.logs.filter((l) => /^reload refused/.test(l.msg ?? '')).at(-1);
      assert.ok(JSON.stringify(refusal).includes('fleetgate.yaml'), `the refusal names the file and the problem: ${JSON.stringify(refusal)}`);
    } finally {
      await load.stop();
    }
    assert.deepEqual(load.failures, [], 'no request failed while bad files were refused');
    assert.deepEqual((await replicas(gw)).map((r) => `${r.id} ${r.url} ${r.slots}`).sort(), before, 'the old fleet stays');
    assert.equal((await chat(gw, 'm')).status, 200);
    // A valid file is accepted again afterwards.
    rewriteConfig(gw, config({ m: [b.url, c.url], q: [q2.url] }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    assert.equal((await replicaByUrl(gw, c.url)).slots, 1);
    assert.equal((await chat(gw, 'm')).status, 200);
  });
});

describe('SIGHUP reload: endpoints changing model, and coming back', () => {
  let x; let y; let z;
  let gw;

  const config = ({ p, q }) => ({
    admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
    health: FAST_HEALTH,
    models: [
      { name: 'p', slots: 1, endpoints: p },
      { name: 'q', slots: 1, endpoints: q },
    ],
    routing: { retries: 0, queue_timeout: '3s' },
  });
  const listing = async () => JSON.stringify((await replicas(gw)).map((r) => [r.id, r.model, r.url, r.state]));

  before(async () => {
    x = await startFakeReplica({ name: 'x', mode: { delayMs: 10 } });
    y = await startFakeReplica({ name: 'y', mode: { delayMs: 10 } });
    z = await startFakeReplica({ name: 'z', mode: { delayMs: 10 } });
    gw = await startGateway(config({ p: [x.url, y.url], q: [z.url] }), { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of [x, y, z]) {
      await f?.close();
    }
  });

  test('an endpoint moved to another model serves that model', async () => {
    // y leaves model p and joins model q.
    rewriteConfig(gw, config({ p: [x.url], q: [z.url, y.url] }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    // Once a pending removal of its model-p entry is swept (every second), y is listed under q.
    await eventually(async () => (await replicaByUrl(gw, y.url))?.model === 'q', { timeoutMs: 10000, what: 'y listed under model q' })
      .catch(async (e) => {
        e.message += `; replicas: ${await listing()}`;
        throw e;
      });
    await eventually(async () => (await replicaByUrl(gw, y.url))?.state === 'healthy', { timeoutMs: 3000, what: 'y healthy' });
    const before = served(y).length;
    const hold = chat(gw, 'q', { fake: { type: 'hold' } }); // z busy: the next request needs y
    await eventually(() => z.inFlight === 1 || y.inFlight === 1, { what: 'a held request' });
    const res = await chat(gw, 'q', {}, { timeoutMs: 5000 });
    z.release();
    y.release();
    assert.equal(res.status, 200, res.text);
    assert.equal((await hold).status, 200);
    assert.ok(served(y).length > before, 'y serves model q');
    assert.equal((await fleet(gw, 'q')).registered, 2);
    assert.equal((await fleet(gw, 'p')).registered, 1);
  });

  test('an endpoint removed and listed again while its last request runs stays in the fleet', async () => {
    const held = chat(gw, 'p', { fake: { type: 'hold' } });
    await eventually(() => x.inFlight === 1, { what: 'the held request on x' });
    rewriteConfig(gw, config({ p: [], q: [z.url] }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    assert.equal((await replicaByUrl(gw, x.url))?.state, 'draining');
    // The operator changes their mind: x is listed again before its request is done.
    rewriteConfig(gw, config({ p: [x.url], q: [z.url] }));
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    x.release();
    assert.equal((await held).status, 200, 'the in-flight request finished');
    // More than a sweep (1 s): z's probes (every 500 ms, on the same event loop as the sweep
    // timer) mark the time; a pending removal would have happened by now.
    const rounds = z.probes.length;
    await eventually(() => z.probes.length >= rounds + 4, { timeoutMs: 10000, what: 'four probe rounds' });
    assert.ok(await replicaByUrl(gw, x.url), `x is in the configuration, so it stays in the fleet; replicas: ${await listing()}`);
    await eventually(async () => (await replicaByUrl(gw, x.url))?.state === 'healthy', { timeoutMs: 3000, what: 'x healthy' });
    const answer = await chat(gw, 'p', {}, { timeoutMs: 5000 });
    assert.equal(answer.status, 200, `model p has a replica to serve it: ${answer.text}`);
  });
});
