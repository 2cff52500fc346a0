// Fleet lifecycle, health: a replica that starts failing is ejected and traffic moves to the others
// with no client error, then it recovers and receives traffic again (time to eject and time to
// route to it again are printed); active probes alone catch a dead replica; a hanging replica does
// not stall the fleet; a probe timing out never cuts the replica's in-flight requests; the last
// healthy replica is never ejected on traffic failures alone; a replica that closes idle
// keep-alive connections is never failed by its probes.

import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, makeTempDir, makeTestCerts, removeDir, startGateway } from './lib/gateway.mjs';
import {
  FAST_HEALTH, Load, TOKEN_ENV, chat, failEverything, figure, hangEverything, heal, replicaByUrl, served, setProbe,
  stateChanges, waitForState, waitForStateLog,
} from './lib/lifecycle_util.mjs';

const FAIL_500 = { type: 'status', status: 500 };

describe('a replica that starts failing', () => {
  const fakes = [];
  let a;
  let gw;

  before(async () => {
    for (const name of ['a', 'b', 'c']) {
      fakes.push(await startFakeReplica({ name, mode: { delayMs: 5 } }));
    }
    a = fakes[0];
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [{ name: 'm', slots: 2, endpoints: fakes.map((f) => f.url) }],
      routing: { retries: 2, queue_timeout: '10s' },
      upstream: { first_byte_timeout: '2s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of fakes) {
      await f.close();
    }
  });

  test('is ejected under traffic with no client error, and gets traffic again once it recovers', async (t) => {
    const id = (await replicaByUrl(gw, a.url)).id;
    const load = new Load(gw, 'm', { concurrency: 4 }).start();
    try {
      await load.waitForMore(20);
      assert.ok(served(a).length > 0, 'a gets its share of traffic while healthy');

      // a starts failing: 500 on /health and on every request.
      const logMark = gw.logs.length;
      const failedAt = Date.now();
      failEverything(a);
      const ejection = await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 5000 });
      const ejectedAt = Date.now();
      figure(t, 'time to eject a failing replica (under load, 4 concurrent clients)', `${ejectedAt - failedAt} ms (reason: ${ejection.reason})`);
      assert.equal(ejection.from, 'healthy');
      assert.equal((await replicaByUrl(gw, a.url)).state, 'unhealthy');

      // While it still fails, traffic goes to the others only.
      await eventually(() => a.inFlight === 0, { what: 'requests bound before the ejection finished' });
      const aCount = served(a).length;
      const others = () => served(fakes[1]).length + served(fakes[2]).length;
      const othersBefore = others();
      // 30 requests arriving at the others (arrivals, not completions: up to 4 requests counted in
      // othersBefore were still in flight, so "30 more answers" would not mean 30 new arrivals).
      await eventually(() => others() >= othersBefore + 30, { timeoutMs: 15000, what: '30 more requests at the others' });
      assert.equal(served(a).length, aCount, 'an unhealthy replica receives no request');

      // It recovers: probes resume after the back-off (5 s after a passive ejection) and prove it.
      const recoveredAt = Date.now();
      const before = served(a).length;
      heal(a, { delayMs: 5 });
      await waitForStateLog(gw, id, 'healthy', { fromIndex: logMark, timeoutMs: 12000 });
      const healthyAt = Date.now();
      await eventually(() => served(a).length > before, { timeoutMs: 5000, what: 'a request routed to the recovered replica' });
      const routedAt = Date.now();
      figure(t, 'time from recovery to healthy again', `${healthyAt - recoveredAt} ms (${healthyAt - ejectedAt} ms after the ejection; back-off 5 s)`);
      figure(t, 'time from recovery to the first routed request', `${routedAt - recoveredAt} ms`);
      await load.waitForMore(20);
    } finally {
      await load.stop();
    }
    assert.deepEqual(load.failures, [], 'no client error while the replica failed and recovered');
    assert.ok(load.ok > 60);
    const changes = stateChanges(gw, id).map((l) => `${l.from}->${l.to}`);
    assert.deepEqual(changes, ['healthy->unhealthy', 'unhealthy->healthy'], 'each state change logged once');
    const metrics = await gw.metrics();
    assert.match(metrics, /fleetgate_replica_state_changes_total\{[^}]*to="unhealthy"[^}]*\} [1-9]/);
    assert.match(metrics, /fleetgate_replicas\{[^}]*state="healthy"[^}]*\} 3/);
  });

  test('without traffic, active probes alone mark a dead replica unhealthy and a live one healthy again', async (t) => {
    const b = fakes[1];
    const id = (await replicaByUrl(gw, b.url)).id;
    await waitForState(gw, b.url, 'healthy');
    const logMark = gw.logs.length;
    const failedAt = Date.now();
    failEverything(b);
    const down = await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 5000 });
    const detected = Date.now() - failedAt;
    figure(t, 'time for probes to detect a dead replica (interval 500ms, unhealthy_after 3)', `${detected} ms`);
    assert.equal(down.reason, 'probe failed 3 times', 'after unhealthy_after failed probes, not sooner');

    const upAt = Date.now();
    heal(b, { delayMs: 5 });
    const up = await waitForStateLog(gw, id, 'healthy', { fromIndex: logMark, timeoutMs: 5000 });
    figure(t, 'time for probes to prove a recovered replica (healthy_after 2)', `${Date.now() - upAt} ms`);
    assert.match(up.reason, /probe/);
    // Routable again: with the other two replicas' four slots held, b takes the fifth request.
    // (One request at a time proves nothing under expected_finish, the default: a replica whose
    // speed it has learned and whose cache holds the prompt finishes such a request first, so b
    // may rightly stay idle while the fleet is quiet.)
    const before = served(b).length;
    const holds = [1, 2, 3, 4, 5].map((i) => chat(gw, 'm', { fake: { type: 'hold' }, i }));
    await eventually(() => fakes.reduce((n, f) => n + f.inFlight, 0) === 5, { what: 'five held requests' });
    assert.ok(b.inFlight >= 1, 'the recovered replica gets traffic again');
    for (const f of fakes) {
      f.release();
    }
    assert.deepEqual((await Promise.all(holds)).map((r) => r.status), [200, 200, 200, 200, 200]);
    assert.ok(served(b).length > before, 'the recovered replica served again');
  });
});

describe('a phone that goes offline (connections refused)', () => {
  const fakes = [];
  let gw;

  before(async () => {
    for (const name of ['o1', 'o2', 'o3']) {
      fakes.push(await startFakeReplica({ name, mode: { delayMs: 5 } }));
    }
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [{ name: 'm', slots: 2, endpoints: fakes.map((f) => f.url) }],
      routing: { retries: 2, queue_timeout: '10s' },
      upstream: { connect_timeout: '1s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of fakes) {
      await f.close();
    }
  });

  test('is ejected at once and its traffic moves to the others with no client error', async (t) => {
    const dead = fakes[0];
    const id = (await replicaByUrl(gw, dead.url)).id;
    const load = new Load(gw, 'm', { concurrency: 4 }).start();
    try {
      await load.waitForMore(20);
      const logMark = gw.logs.length;
      const offAt = Date.now();
      await dead.close(); // the port now refuses connections
      const down = await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 5000 });
      figure(t, 'time to eject a dead phone (connection refused, under load)', `${Date.now() - offAt} ms (reason: ${down.reason})`);
      await load.waitForMore(40);
    } finally {
      await load.stop();
    }
    assert.deepEqual(load.failures, [], 'no client error');
    const r = await replicaByUrl(gw, dead.url);
    assert.equal(r.state, 'unhealthy');
    const metrics = await gw.metrics();
    assert.match(metrics, /fleetgate_replicas\{[^}]*state="unhealthy"[^}]*\} 1/);
  });
});

describe('a replica that hangs (accepts, never answers)', () => {
  const fakes = [];
  let hung;
  let gw;

  before(async () => {
    for (const name of ['h1', 'h2', 'h3']) {
      fakes.push(await startFakeReplica({ name, mode: { delayMs: 5 } }));
    }
    hung = fakes[0];
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [{ name: 'm', slots: 2, endpoints: fakes.map((f) => f.url) }],
      routing: { retries: 2, queue_timeout: '10s' },
      upstream: { first_byte_timeout: '1s', connect_timeout: '1s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of fakes) {
      await f.close();
    }
  });

  test('does not stall the fleet: requests keep succeeding through the others', async (t) => {
    const id = (await replicaByUrl(gw, hung.url)).id;
    const load = new Load(gw, 'm', { concurrency: 4 }).start();
    let hungAt;
    try {
      await load.waitForMore(10);
      const logMark = gw.logs.length;
      hungAt = Date.now();
      hangEverything(hung);
      const down = await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 15000 });
      figure(t, 'time to mark a hanging replica unhealthy', `${Date.now() - hungAt} ms (reason: ${down.reason})`);
      // Requests bound to it before that time out (first_byte_timeout 1s) and fail over: the
      // gateway gives up on them (closes the connections) instead of keeping them.
      await eventually(() => hung.inFlight === 0, { timeoutMs: 5000, what: 'hung requests closed by the gateway' });
      const count = served(hung).length;
      const from = load.results.length;
      await load.waitForMore(40);
      const after = load.results.slice(from);
      figure(t, 'slowest request once the hanging replica is out', `${Math.max(...after.map((r) => r.end - r.start))} ms`);
      assert.equal(served(hung).length, count, 'no new request reaches the hanging replica');
    } finally {
      await load.stop();
    }
    assert.deepEqual(load.failures, [], 'every request succeeded');
    const worst = Math.max(...load.results.filter((r) => r.start >= hungAt).map((r) => r.end - r.start));
    figure(t, 'slowest request after the replica hung (first_byte_timeout 1s)', `${worst} ms`);
  });
});

describe('probes and in-flight work', () => {
  let slow;
  let other;
  let solo; // the only replica of model "solo"
  let gw;

  before(async () => {
    slow = await startFakeReplica({ name: 'slow' });
    other = await startFakeReplica({ name: 'other' });
    solo = await startFakeReplica({ name: 'solo' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [
        { name: 'm', endpoints: [slow.url, other.url] },
        { name: 'solo', endpoints: [{ url: solo.url, slots: 2 }] },
      ],
      routing: { retries: 0, queue_timeout: '10s' },
      upstream: { first_byte_timeout: '15s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of [slow, other, solo]) {
      await f?.close();
    }
  });

  test('a phone whose probes time out mid-prompt goes unhealthy only after unhealthy_after, and its in-flight request is not cut', async () => {
    const id = (await replicaByUrl(gw, slow.url)).id;
    // One long request on `slow` (held until released); `other` is kept busy so the request goes to `slow`.
    const pending = [];
    for (let i = 0; i < 2; ++i) {
      pending.push(chat(gw, 'm', { fake: { type: 'hold' }, i }));
    }
    await eventually(() => slow.inFlight === 1 && other.inFlight === 1, { what: 'one held request on each replica' });
    const logMark = gw.logs.length;
    setProbe(slow, { type: 'hang' }); // its probes now time out (the phone is "busy")
    const down = await waitForStateLog(gw, id, 'unhealthy', { fromIndex: logMark, timeoutMs: 15000 });
    assert.match(down.reason, /3/, `unhealthy after 3 failed probes: ${down.reason}`);
    // Two more (timed-out) probes later, the request is still open.
    const probes = slow.probes.length;
    await eventually(() => slow.probes.length >= probes + 2, { timeoutMs: 10000, what: 'two more probes' });
    assert.equal(slow.inFlight, 1, 'the in-flight request is still open');
    assert.equal(served(slow).filter((r) => r.closedEarly).length, 0, 'and was not cut');
    setProbe(slow, null);
    slow.release();
    other.release();
    const results = await Promise.all(pending);
    assert.deepEqual(results.map((r) => r.status), [200, 200], 'both held requests complete');
    await waitForStateLog(gw, id, 'healthy', { fromIndex: logMark, timeoutMs: 5000 });
  });

  test('the last healthy replica of a model is never ejected by traffic failures alone', async () => {
    const id = (await replicaByUrl(gw, solo.url)).id;
    const fails = [];
    for (let i = 0; i < 6; ++i) {
      // Only these requests fail (the fake answers 500 for bodies that ask it to); probes pass.
      fails.push((await chat(gw, 'solo', { fake: FAIL_500 })).status);
    }
    assert.deepEqual(fails, [502, 502, 502, 502, 502, 502], 'each replica 500 ends in a 502 from the gateway (retries 0)');
    const r = await replicaByUrl(gw, solo.url);
    assert.equal(r.state, 'healthy', 'still healthy: it is the only one');
    assert.ok(r.consecutive_failures >= 3, `failures are counted (${r.consecutive_failures})`);
    assert.ok(r.failures >= 6, `failures counted in the replica view (${r.failures})`);
    assert.equal(stateChanges(gw, id).length, 0, 'no state change');
    assert.equal((await chat(gw, 'solo')).status, 200, 'and it serves the next good request');
    assert.equal((await replicaByUrl(gw, solo.url)).consecutive_failures, 0, 'a success resets the streak');
  });
});

describe('what counts as a failure', () => {
  let p1; let p2;
  let plain;
  let gw;

  before(async () => {
    p1 = await startFakeReplica({ name: 'p1' });
    p2 = await startFakeReplica({ name: 'p2' });
    plain = await startFakeReplica({ name: 'plain', servedModels: ['plain'] });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [
        { name: 'pair', endpoints: [p1.url, p2.url] },
        { name: 'plain', health: { path: '/v1/models', unhealthy_after: 2 }, endpoints: [plain.url] },
      ],
      routing: { retries: 0, queue_timeout: '10s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of [p1, p2, plain]) {
      await f?.close();
    }
  });

  test('busy answers (429, 503) never eject a replica; 502s do', async () => {
    for (const status of [429, 503]) {
      const got = [];
      for (let i = 0; i < 8; ++i) {
        got.push((await chat(gw, 'pair', { fake: { type: 'status', status, headers: { 'Retry-After': '1' } } })).status);
      }
      assert.ok(got.every((s) => s === 503 || s === status), `busy answers reach the client: ${got}`);
      for (const f of [p1, p2]) {
        assert.equal((await replicaByUrl(gw, f.url)).state, 'healthy', `${status} x8: ${f.name} is busy, not failing`);
      }
    }
    assert.equal(gw.logs.filter((l) => l.msg === 'replica state changed').length, 0);
    // Real failures: the first replica to fail 3 times in a row is ejected; the other is then the
    // last healthy one and stays.
    for (let i = 0; i < 8; ++i) {
      assert.equal((await chat(gw, 'pair', { fake: { type: 'status', status: 502 } })).status, 502);
    }
    const states = [];
    for (const f of [p1, p2]) {
      states.push((await replicaByUrl(gw, f.url)).state);
    }
    assert.deepEqual(states.sort(), ['healthy', 'unhealthy'], `one ejected, the last healthy one kept: ${states}`);
    const ejection = gw.logs.find((l) => l.msg === 'replica state changed' && l.to === 'unhealthy');
    assert.match(ejection.reason, /traffic/);
  });

  test("a model's own probe path is used, and probes never generate tokens", async () => {
    await eventually(() => plain.probes.length >= 3, { what: 'probes of plain' });
    assert.ok(plain.probes.every((p) => p.path === '/v1/models'), `probed paths: ${plain.probes.map((p) => p.path)}`);
    assert.ok(p1.probes.length > 0 && p1.probes.every((p) => p.path === '/health'));
    assert.equal(served(plain).length, 0, 'a probe is a GET, never a completion');
    // Per-model unhealthy_after 2: two failed probes are enough.
    const id = (await replicaByUrl(gw, plain.url)).id;
    plain.setHealth(500);
    const down = await waitForStateLog(gw, id, 'unhealthy', { timeoutMs: 5000 });
    assert.match(down.reason, /2/, down.reason);
    plain.setHealth(200);
    await waitForStateLog(gw, id, 'healthy', { timeoutMs: 5000 });
  });
});

for (const scheme of ['http', 'https']) {
  describe(`a replica that closes idle keep-alive connections (${scheme})`, () => {
    // llama.cpp's server closes a connection idle for 5 s, and probes come every 5 s (±10%): a
    // probe must not be sent on (and failed by) a connection the replica closed since the last
    // one. (Both are read at the checker's ticks; https ones through their OpenSSL connection.)
    let certDir;
    let fake;
    let gw;

    before(async () => {
      let tls = null;
      let upstream = {};
      if (scheme === 'https') {
        certDir = makeTempDir('fleetgate-certs-');
        const certs = makeTestCerts(certDir);
        tls = { key: certs.key, cert: certs.cert };
        upstream = { ca_file: certs.caFile };
      }
      // Node closes a keep-alive connection about 1 s after its keepAliveTimeout (its buffer),
      // so ~1.05 s here: probes 1.5 s apart each find the last one's connection closed.
      fake = await startFakeReplica({ name: `idle-closer-${scheme}`, tls, keepAliveTimeoutMs: 50 });
      gw = await startGateway({
        admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
        log: { level: 'debug' },
        health: { ...FAST_HEALTH, interval: '1500ms', timeout: '1s' },
        models: [{ name: 'm', slots: 1, endpoints: [fake.url] }],
        upstream,
      }, { env: TOKEN_ENV });
    });

    after(async () => {
      await gw?.stop();
      await fake?.close();
      if (certDir) {
        removeDir(certDir);
      }
    });

    test('is never failed by its probes: each one after such a close connects anew', async () => {
      await fake.waitFor((f) => f.probes.length >= 6, { timeoutMs: 30000, what: '6 probes' });
      // Every probe found the connection of the one before closed.
      assert.ok(fake.connections >= 5, `${fake.connections} connections for ${fake.probes.length} probes`);
      const failed = gw.logs.filter((l) => l.msg === 'probe failed');
      assert.deepEqual(failed.map((l) => l.error), [], 'no probe failed');
      assert.equal((await replicaByUrl(gw, fake.url)).state, 'healthy');
    });
  });
}

for (const scheme of ['http', 'https']) {
  describe(`a probe answer that arrives in pieces (${scheme})`, () => {
    // The head at once, then a chunked body in two pieces 150 ms apart: the gateway reads probe
    // answers at its ticks (here every 50 ms), so the answer is read over several of them. It
    // passes, and its time is until its last piece arrived (~300 ms), not until it was read (https:
    // each piece its own TLS record, read by OpenSSL with recvmsg, which gives its arrival time).
    let server;
    let url;
    let probes = 0;
    let gw;
    let certDir;

    before(async () => {
      let upstream = {};
      let listen = (handler) => net.createServer(handler);
      if (scheme === 'https') {
        certDir = makeTempDir('fleetgate-certs-');
        const certs = makeTestCerts(certDir);
        upstream = { ca_file: certs.caFile };
        listen = (handler) => tls.createServer({ key: certs.key, cert: certs.cert }, handler);
      }
      server = listen((socket) => {
        let pending = '';
        socket.on('data', (data) => {
          pending += data.toString('latin1');
          let end;
          while ((end = pending.indexOf('\r\n\r\n')) >= 0) {
            pending = pending.slice(end + 4);
            ++probes;
            socket.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
            setTimeout(() => socket.write('7\r\n{"statu\r\n'), 150);
            setTimeout(() => socket.write('8\r\ns":"ok"}\r\n0\r\n\r\n'), 300);
          }
        });
        socket.on('error', () => {});
      });
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      url = `${scheme}://127.0.0.1:${server.address().port}`;
      gw = await startGateway({
        admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
        log: { level: 'debug' },
        health: { ...FAST_HEALTH, interval: '800ms', timeout: '600ms' },
        models: [{ name: 'm', slots: 1, endpoints: [url] }],
        upstream,
      }, { env: TOKEN_ENV });
    });

    after(async () => {
      await gw?.stop();
      server?.closeAllConnections?.();
      await new Promise((resolve) => server?.close(resolve) ?? resolve());
      if (certDir) {
        removeDir(certDir);
      }
    });

    test('is read whole over several ticks, passes, and counts until its last piece', async () => {
      const id = (await replicaByUrl(gw, url)).id;
      const count = await gw.waitForMetric('fleetgate_replica_health_check_seconds_count', { replica: id },
        (v) => v >= 4, { timeoutMs: 20000 });
      const sum = await gw.metric('fleetgate_replica_health_check_seconds_sum', { replica: id });
      const failed = gw.logs.filter((l) => l.msg === 'probe failed');
      assert.deepEqual(failed.map((l) => l.error), [], 'no probe failed');
      assert.equal((await replicaByUrl(gw, url)).state, 'healthy');
      // Each took ~300 ms (its last piece), within its 600 ms timeout; never less than 300 ms.
      assert.ok(sum / count >= 0.29 && sum / count < 0.6, `mean probe time ${sum / count} s over ${count} probes`);
      assert.ok(probes >= count);
    });
  });
}
