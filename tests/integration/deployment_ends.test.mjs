// Capacity that expires (issue 12, item 6): agents register their Acurast deployment_id and
// ends_at; /admin/v1/fleet counts the healthy replicas ending within the next hour
// (ending_within_hour, short_after_endings), fleetgate_replicas_ending{model} exports it, the
// replica list shows both fields, and a malformed value is refused with 400 naming the field.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, metricValue, startGateway } from './lib/gateway.mjs';
import { FAST_HEALTH, TOKEN_ENV, fleet, register, replicaByUrl, waitForState } from './lib/lifecycle_util.mjs';

const REGISTRATION = {
  token_env: 'FG_IT_REGISTRATION_TOKEN',
  allowed_urls: ['http://127.0.0.1:*'],
  expire_after: '60s',
  heartbeat_interval: '10s',
};

const iso = (msFromNow) => new Date(Date.now() + msFromNow).toISOString().replace(/\.\d{3}Z$/, 'Z');

describe('deployment end times', () => {
  const fakes = [];
  let gw;

  before(async () => {
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [{ name: 'm', replicas: 2, endpoints: [] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of fakes) {
      await f.close();
    }
  });

  test('healthy replicas ending within the hour are counted, shown and exported', async () => {
    const soon = await startFakeReplica({ name: 'soon' });
    const later = await startFakeReplica({ name: 'later' });
    fakes.push(soon, later);
    const soonEnds = iso(30 * 60_000);
    const a = await register(gw, { url: soon.url, model: 'm', slots: 1, deployment_id: '4217', ends_at: soonEnds });
    const b = await register(gw, { url: later.url, model: 'm', slots: 1, deployment_id: '4218', ends_at: iso(5 * 3600_000) });
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    await waitForState(gw, soon.url, 'healthy', { timeoutMs: 8000 });
    await waitForState(gw, later.url, 'healthy', { timeoutMs: 8000 });
    const entry = await replicaByUrl(gw, soon.url);
    assert.equal(entry.deployment_id, '4217');
    assert.equal(entry.ends_at, soonEnds);
    const m = await fleet(gw, 'm');
    assert.equal(m.healthy, 2);
    assert.equal(m.ending_within_hour, 1);
    assert.equal(m.short_after_endings, true, '2 healthy - 1 ending < 2 desired');
    assert.equal(m.degraded, false);
    await eventually(async () => metricValue(await gw.metrics(), 'fleetgate_replicas_ending', { model: 'm' }) === 1, {
      timeoutMs: 5000,
      what: 'fleetgate_replicas_ending{model="m"} 1',
    });
  });

  test('a malformed deployment_id or ends_at is refused naming the field', async () => {
    const phone = await startFakeReplica({ name: 'bad' });
    fakes.push(phone);
    for (const [extra, field] of [
      [{ ends_at: 'tomorrow' }, 'ends_at'],
      [{ ends_at: 1796407200 }, 'ends_at'],
      [{ deployment_id: 42 }, 'deployment_id'],
    ]) {
      const res = await register(gw, { url: phone.url, model: 'm', slots: 1, ...extra });
      assert.equal(res.status, 400, res.text);
      assert.match(res.json.error.message, new RegExp(field));
    }
    assert.equal(await replicaByUrl(gw, phone.url), undefined, 'nothing was added');
  });
});
