// TLS session resumption towards https replicas: the gateway keeps each replica's tickets (the
// probe's connection makes the first, full handshake) and resumes them on its next connections
// to that replica, each ticket once; a removed replica's are dropped. Seen through the metrics
// fleetgate_upstream_tls_handshakes_total{kind} and fleetgate_upstream_tls_sessions.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { makeTempDir, makeTestCerts, removeDir, startGateway, stopChecked } from './lib/gateway.mjs';
import { FAST_HEALTH, TOKEN_ENV, admin, chat, replicaByUrl, served, waitForState } from './lib/lifecycle_util.mjs';

describe('upstream TLS sessions', () => {
  let certDir;
  let s1; let s2;
  let gw;

  before(async () => {
    certDir = makeTempDir('fleetgate-certs-');
    const certs = makeTestCerts(certDir);
    const tls = { key: certs.key, cert: certs.cert };
    // Each answer waits 300 ms: requests sent together hold every slot at once.
    // Keep-alive for a minute: the probe's connection, which took the tickets, is never replaced
    // (a new one would use a ticket).
    s1 = await startFakeReplica({ name: 's1', tls, mode: { delayMs: 300 }, keepAliveTimeoutMs: 60000 });
    s2 = await startFakeReplica({ name: 's2', tls, mode: { delayMs: 300 }, keepAliveTimeoutMs: 60000 });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      // Probes every 2 s with a timeout of 1.9 s: a late answer on a loaded machine would close
      // the probe's connection, and its replacement would use a ticket.
      health: { ...FAST_HEALTH, interval: '2s', timeout: '1900ms' },
      models: [{ name: 't', slots: 2, endpoints: [s1.url, s2.url] }],
      // Interchangeable slots: four requests at once take all four (expected_finish may rightly
      // hold one for the replica it knows).
      routing: { policy: 'least_loaded' },
      upstream: { ca_file: certs.caFile },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await stopChecked(gw);
    await s1?.close();
    await s2?.close();
    removeDir(certDir);
  });

  test('each probe\'s full handshake leaves its replica\'s sessions; a removed replica\'s are dropped', async () => {
    await waitForState(gw, s1.url, 'healthy');
    await waitForState(gw, s2.url, 'healthy');
    // Each probe connection's full handshake, then its tickets (sent after the handshake, taken
    // with the probe's answer) kept for that replica.
    await gw.waitForMetric('fleetgate_upstream_tls_sessions', {}, (v) => v === 2, { timeoutMs: 8000 });
    const id = (await replicaByUrl(gw, s1.url)).id;
    const res = await admin(gw, 'DELETE', `/admin/v1/replicas/${id}`);
    assert.ok(res.status === 200 || res.status === 202, `${res.status} ${res.text}`);
    await gw.waitForMetric('fleetgate_upstream_tls_sessions', {}, (v) => v === 1, { timeoutMs: 8000 });
  });

  test('requests open connections that resume the probe\'s sessions: no full handshake', async () => {
    const fullBefore = await gw.metric('fleetgate_upstream_tls_handshakes_total', { kind: 'full' });
    assert.ok(fullBefore >= 2, `full handshakes: ${fullBefore}`);
    const resumedBefore = await gw.metric('fleetgate_upstream_tls_handshakes_total', { kind: 'resumed' });
    // Two at once on s2's two slots (each answer waits 300 ms): two new connections, one for each
    // of the two tickets the probe's handshake brought (Node's server sends two, and none after a
    // resumed handshake). On a loaded machine the second may come after the first answer and
    // reuse its pooled connection: then one.
    const results = await Promise.all([0, 1].map(() => chat(gw, 't')));
    for (const r of results) {
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(served(s2).length, 2);
    await gw.waitForMetric('fleetgate_upstream_tls_handshakes_total', { kind: 'resumed' },
      (v) => v >= resumedBefore + 1, { timeoutMs: 8000 });
    assert.equal(await gw.metric('fleetgate_upstream_tls_handshakes_total', { kind: 'full' }), fullBefore);
  });
});
