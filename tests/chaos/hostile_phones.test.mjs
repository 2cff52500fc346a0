// Chaos: one hostile phone beside healthy ones, in every way of misbehaving at once-per-scenario
// (lib/hostile_phone.mjs): it hangs after the head, trickles one byte a second, sends garbage,
// sends 1xx before its answer, streams an event with no newline, sends a 100 MB event (and a
// 100 MB whole answer), resets mid-stream, nests its usage JSON 100k levels deep, flaps 5xx, serves the wrong model (on /health and on
// /v1/models). Throughout (lib/invariants.mjs): every request gets exactly one terminal answer
// before routing.request_timeout (plus a grace); no phone ever holds more requests than its
// slots; the gateway's RSS stays under RSS_BOUND; it never dies; the healthy phones stay healthy
// and keep serving a control client.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from '../integration/lib/fake_replica.mjs';
import { eventually, request, startGateway, stopChecked } from '../integration/lib/gateway.mjs';
import { startHostilePhone } from './lib/hostile_phone.mjs';
import { MiB, RSS_BOUND, Watch, assertAllTerminal, terminalAnswer } from './lib/invariants.mjs';

// The bound on the gateway's resident memory under every scenario (docs/operations.md).
const REQUEST_TIMEOUT_MS = 4000;
// routing.request_timeout plus a grace for a loaded 2-core machine: a request still without its
// terminal answer then is a hang.
const DEADLINE_MS = REQUEST_TIMEOUT_MS + 10000;
const SLOTS = 2;
const TEST_TIMEOUT = { timeout: 90000 };

describe('chaos: hostile phones', () => {
  let gw;
  let hostile; // model h, beside healthyH
  let hostileV; // model v (probed on /v1/models), beside healthyV
  let healthyH;
  let healthyV;
  let control; // model c
  let watch;

  before(async () => {
    hostile = await startHostilePhone({ name: 'hostile', model: 'h' });
    hostileV = await startHostilePhone({ name: 'hostile-v', model: 'v' });
    healthyH = await startFakeReplica({ name: 'healthy-h' });
    healthyV = await startFakeReplica({ name: 'healthy-v', servedModels: ['v'] });
    control = await startFakeReplica({ name: 'control' });
    gw = await startGateway({
      server: { write_timeout: '3s' },
      routing: { request_timeout: `${REQUEST_TIMEOUT_MS}ms`, queue_timeout: '3s', keepalive_interval: '1s' },
      upstream: { connect_timeout: '1s', first_byte_timeout: '2s', idle_timeout: '2s', max_response_bytes: 4 * MiB },
      health: { interval: '300ms', timeout: '250ms', unhealthy_after: 3, healthy_after: 1, eject_after: 3 },
      models: [
        { name: 'h', endpoints: [{ url: hostile.url, slots: SLOTS }, { url: healthyH.url, slots: SLOTS }] },
        { name: 'v', health: { path: '/v1/models' }, endpoints: [{ url: hostileV.url, slots: SLOTS }, { url: healthyV.url, slots: SLOTS }] },
        { name: 'c', endpoints: [{ url: control.url, slots: 4 }] },
      ],
    });
    watch = await new Watch({
      gw,
      healthy: [{ url: healthyH.url, model: 'h' }, { url: healthyV.url, model: 'v' }, { url: control.url, model: 'c' }],
      control: { model: 'c' },
      rssBoundBytes: RSS_BOUND,
      deadlineMs: DEADLINE_MS,
    }).start();
  });

  after(async () => {
    await watch?.stop();
    if (watch) {
      console.log(watch.report('hostile phones'));
    }
    await stopChecked(gw);
    for (const p of [hostile, hostileV, healthyH, healthyV, control]) {
      await p?.close();
    }
  });

  const state = async (url) => {
    const res = await request(`${gw.adminUrl}/admin/v1/replicas`);
    return res.json.replicas.find((r) => r.url === url);
  };

  // The hostile phone healthy again (probes pass; a scenario may have ejected it), counts reset.
  async function ready(phone, name) {
    await eventually(async () => (await state(phone.url))?.state === 'healthy', {
      timeoutMs: 10000, what: `${phone.name} healthy again before ${name}`,
    });
    phone.resetCounts();
    watch.begin(name);
  }

  // Six requests at once to the model (three streamed), each on its own connection.
  async function burst(model, tag) {
    const sends = [];
    for (let i = 0; i < 6; ++i) {
      const body = { model, stream: i % 2 === 0, messages: [{ role: 'user', content: `${tag} ${i}` }] };
      sends.push(terminalAnswer(gw.publicUrl, '/v1/chat/completions', body, { deadlineMs: DEADLINE_MS }));
    }
    return Promise.all(sends);
  }

  const slotsKept = () => {
    for (const p of [hostile, hostileV, healthyH, healthyV, control]) {
      assert.ok(p.maxInFlight <= (p === control ? 4 : SLOTS), `${p.name} held ${p.maxInFlight} requests at once (slots ${SLOTS})`);
    }
  };

  // One scenario: the hostile phone misbehaves as `mode` says while six requests go to its model.
  function scenario(name, mode, options = {}, check = () => {}) {
    test(name, TEST_TIMEOUT, async () => {
      await ready(hostile, name);
      hostile.setMode(mode, options);
      try {
        const results = await burst('h', mode);
        assertAllTerminal(results, name);
        assert.ok(hostile.requests >= 1, `${name}: the hostile phone received none of the requests`);
        check(results);
      } finally {
        hostile.setMode('healthy');
      }
      slotsKept();
      await watch.checkpoint(name);
    });
  }

  scenario('hangs after the head', 'hangAfterHead');
  scenario('trickles one byte a second', 'trickle', { everyMs: 1000 });
  scenario('sends garbage instead of HTTP', 'garbage');
  scenario('sends 100, 102 and 103 before its answer', 'interim', { interim: [100, 102, 103] }, (results) => {
    for (const r of results) {
      assert.equal(r.status, 200, `interim answers are skipped, the final one relayed: ${r.body.slice(0, 200)}`);
    }
  });
  scenario('streams an event with no newline, endlessly', 'endlessEvent');
  scenario('sends a 100 MB event (and a 100 MB whole answer)', 'hugeEvent', { bytes: 100 * 1000 * 1000 });
  scenario('resets the connection mid-stream', 'resetMidStream', { afterEvents: 2 });
  scenario('nests its usage JSON 100k levels deep', 'nestedJson', { depth: 100000 });
  scenario('flaps 5xx', 'flap5xx', { statuses: [500, 502, 503] });

  test('serves the wrong model on /health: unhealthy with that reason, never given a request', TEST_TIMEOUT, async () => {
    await ready(hostile, 'wrong model on /health');
    hostile.setMode('wrongModel', { served: 'qwen-other' });
    try {
      await eventually(async () => (await state(hostile.url))?.state === 'unhealthy', {
        timeoutMs: 10000, what: 'the wrong-model phone unhealthy',
      });
      const r = await state(hostile.url);
      assert.equal(r.model_check, 'mismatch');
      assert.match(r.last_probe_error ?? '', /qwen-other/);
      hostile.resetCounts();
      assertAllTerminal(await burst('h', 'wrong-model'), 'wrong model on /health');
      assert.equal(hostile.requests, 0, 'no request reached the phone serving another model');
    } finally {
      hostile.setMode('healthy');
    }
    slotsKept();
    await watch.checkpoint('wrong model on /health');
  });

  test('serves the wrong model on /v1/models: the same', TEST_TIMEOUT, async () => {
    await ready(hostileV, 'wrong model on /v1/models');
    hostileV.setMode('wrongModel', { served: 'qwen-other' });
    try {
      await eventually(async () => (await state(hostileV.url))?.state === 'unhealthy', {
        timeoutMs: 10000, what: 'the wrong-model phone unhealthy',
      });
      assert.equal((await state(hostileV.url)).model_check, 'mismatch');
      hostileV.resetCounts();
      const results = await burst('v', 'wrong-model-v');
      assertAllTerminal(results, 'wrong model on /v1/models');
      assert.ok(results.every((r) => r.status === 200), 'the healthy phone beside it served them all');
      assert.equal(hostileV.requests, 0, 'no request reached the phone serving another model');
    } finally {
      hostileV.setMode('healthy');
    }
    slotsKept();
    await watch.checkpoint('wrong model on /v1/models');
  });
});
