// Graceful shutdown: on SIGTERM the gateway stops accepting connections, lets in-flight requests
// finish (up to server.drain_timeout), then exits 0.

import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { openStream, postJson, request, startGateway } from './lib/gateway.mjs';

// Resolves with 'refused' when nothing accepts connections on the URL's port any more, or
// 'accepted' when a connection is accepted (and answers nothing / closes).
function tryConnect(url) {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(port), '127.0.0.1');
    s.on('connect', () => {
      s.destroy();
      resolve('accepted');
    });
    s.on('error', (e) => resolve(e.code === 'ECONNREFUSED' ? 'refused' : e.code));
  });
}

describe('graceful shutdown on SIGTERM', () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'slowpoke' });
    gw = await startGateway({
      server: { drain_timeout: '10s' },
      models: [{ name: 'm', slots: 2, endpoints: [replica.url] }],
    });
  });
  after(async () => {
    await gw?.kill();
    await replica?.close();
  });

  test('in-flight requests complete, new connections are refused, exit code 0', async () => {
    // One slow non-streaming request and one slow stream in flight.
    const slow = postJson(gw.publicUrl, '/v1/chat/completions', {
      model: 'm', messages: [], tag: 'slow', fake: { type: 'json', delayMs: 1500 },
    });
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
      body: { model: 'm', stream: true, tag: 'stream', fake: { type: 'stream', chunks: 8, intervalMs: 150 } },
    });
    await replica.waitFor((r) => r.requests.length === 2, { what: 'both requests at the replica' });
    const adminBefore = await request(`${gw.adminUrl}/healthz`);
    assert.equal(adminBefore.status, 200);

    process.kill(gw.pid, 'SIGTERM');
    await gw.waitForLog((l) => /shutting down|drain/i.test(l.msg ?? ''), { what: 'the shutdown log line' });

    // The public listener is closed at once.
    assert.equal(await tryConnect(gw.publicUrl), 'refused', 'new connections are refused while draining');
    assert.ok(gw.running, 'still running while requests are in flight');

    const res = await slow;
    assert.equal(res.status, 200);
    assert.equal(res.text, replica.requestsWith('"slow"')[0].sent, 'the in-flight answer is complete');
    const text = await stream.done;
    assert.equal(text, replica.requestsWith('"stream"')[0].sentPlain, 'the in-flight stream is complete');
    assert.ok(text.endsWith('data: [DONE]\n\n'));

    const code = await gw.exited;
    assert.equal(code, 0, `exit code ${code}, signal ${gw.signal}`);
    // It did not wait for drain_timeout once idle: the drain ended with the last request (the
    // event it logs), not with the deadline. (A duration would measure the machine.)
    assert.ok(gw.logs.some((l) => l.msg === 'drained: every request finished'), 'drained when the last request ended');
    assert.ok(!gw.logs.some((l) => /drain deadline passed/.test(l.msg ?? '')), 'not by the drain deadline');
    assert.ok(replica.requests.every((r) => !r.closedEarly), 'no upstream exchange was cut');
  });
});

describe('drain deadline', () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'stuck', mode: { type: 'hang' } });
    gw = await startGateway({
      server: { drain_timeout: '500ms' },
      models: [{ name: 'm', endpoints: [replica.url] }],
    });
  });
  after(async () => {
    await gw?.kill();
    await replica?.close();
  });

  test('a request still running at drain_timeout is cut and the process still exits 0', async () => {
    const stuck = postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm', messages: [] }).then(
      (r) => ({ status: r.status }),
      (e) => ({ error: e.code ?? e.message }),
    );
    await replica.waitFor((r) => r.requests.length === 1, { what: 'the stuck request' });
    const signalledAt = Date.now();
    process.kill(gw.pid, 'SIGTERM');
    const code = await gw.exited;
    const elapsed = Date.now() - signalledAt;
    assert.equal(code, 0);
    // Not before the deadline (a lower bound holds however loaded the machine), and ended by it.
    assert.ok(elapsed >= 450, `exited after ${elapsed} ms for a 500 ms drain_timeout`);
    assert.ok(gw.logs.some((l) => /drain deadline passed/.test(l.msg ?? '')), 'the drain deadline closed the request');
    const outcome = await stuck;
    // The client is not left hanging: an error answer or a closed connection.
    assert.ok(outcome.error || outcome.status >= 500, JSON.stringify(outcome));
  });
});

describe('idle gateway', () => {
  test('SIGTERM with nothing in flight (and an idle keep-alive client) exits 0 at once', async (t) => {
    const replica = await startFakeReplica({ name: 'idle' });
    t.after(() => replica.close());
    const gw = await startGateway({ server: { drain_timeout: '10s' }, models: [{ name: 'm', endpoints: [replica.url] }] });
    t.after(() => gw.kill());
    // An idle keep-alive connection must not hold the drain open.
    const idle = net.connect(Number(new URL(gw.publicUrl).port), '127.0.0.1');
    idle.on('error', () => {});
    idle.resume();
    await new Promise((r) => idle.on('connect', r));
    idle.write('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise((r) => idle.once('data', r));
    t.after(() => idle.destroy());
    const code = await gw.stop();
    assert.equal(code, 0);
    // At once: the idle connection did not hold the drain until its 10 s deadline.
    assert.ok(gw.logs.some((l) => l.msg === 'drained: every request finished'), 'drained at once');
    assert.ok(!gw.logs.some((l) => /drain deadline passed/.test(l.msg ?? '')), 'not by the drain deadline');
  });
});
