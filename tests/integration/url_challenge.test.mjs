// Proof of URL control (issue 12, item 5): before a registered URL receives traffic the gateway
// fetches GET <url>/fleetgate/v1/challenge?nonce=<fresh 64 hex> through it and checks the HMAC
// under the secret it issued. A registration pointing at a server the registrant does not run
// stays joining with reason "url_challenge_failed: ..." and never receives a request, however
// well that server answers its health probes; it is retried with back-off, so the real agent
// answering later joins. registration.url_challenge: false turns the check off.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { challengeHmac, startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, startGateway } from './lib/gateway.mjs';
import {
  FAST_HEALTH, REGISTRATION_TOKEN, TOKEN_ENV, admin, chat, replicaByUrl, served, waitForReplica, waitForState,
} from './lib/lifecycle_util.mjs';

const REGISTRATION = {
  token_env: 'FG_IT_REGISTRATION_TOKEN',
  allowed_urls: ['http://127.0.0.1:*'],
  expire_after: '60s',
  heartbeat_interval: '10s',
};

const body = (fake, model = 'm') => ({ url: fake.url, model, slots: 1, agent_version: '0.1.0-it' });
// Registers without handing the secret to the fake (lifecycle_util's register() would).
const rawRegister = (gw, b) => admin(gw, 'POST', '/admin/v1/replicas/register', { token: REGISTRATION_TOKEN, body: b });

describe('URL challenge', () => {
  const fakes = [];
  let fixed;
  let gw;

  before(async () => {
    fixed = await startFakeReplica({ name: 'fixed' });
    fakes.push(fixed);
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: REGISTRATION,
      health: FAST_HEALTH,
      models: [{ name: 'm', replicas: 2, endpoints: [fixed.url] }],
      routing: { queue_timeout: '5s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    for (const f of fakes) {
      await f.close();
    }
  });

  async function fake(name) {
    const f = await startFakeReplica({ name });
    fakes.push(f);
    return f;
  }

  test('a URL pointing at a server the registrant does not run stays joining and gets no traffic', async () => {
    // A healthy OpenAI-compatible server someone else runs: its probes pass, but it never got the
    // secret, so it cannot answer the challenge (503), and a stale agent answers with another one.
    const victim = await fake('victim');
    const stale = await fake('stale');
    stale.setChallengeSecret('a secret the gateway never issued');
    const a = await rawRegister(gw, body(victim));
    const b = await rawRegister(gw, body(stale));
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    // Retried with back-off (250 ms, 500 ms, ...): at least three attempts within ~2 s.
    await eventually(() => victim.challenges.length >= 3 && stale.challenges.length >= 3, {
      timeoutMs: 8000,
      what: 'three challenge attempts each',
    });
    await eventually(() => victim.probes.length >= 3, { timeoutMs: 5000, what: 'probes of the victim' });
    const v = await replicaByUrl(gw, victim.url);
    const s = await replicaByUrl(gw, stale.url);
    assert.equal(v.state, 'joining');
    assert.equal(v.state_reason, 'url_challenge_failed: HTTP 503');
    assert.equal(s.state, 'joining');
    assert.equal(s.state_reason, 'url_challenge_failed: wrong hmac');
    // Every nonce is fresh and well-formed.
    const nonces = [...victim.challenges, ...stale.challenges].map((c) => c.nonce);
    assert.equal(new Set(nonces).size, nonces.length);
    for (const n of nonces) {
      assert.match(n, /^[0-9a-f]{64}$/);
    }
    // Traffic goes to the static endpoint only.
    for (let i = 0; i < 6; ++i) {
      const res = await chat(gw, 'm');
      assert.equal(res.status, 200, res.text);
    }
    assert.equal(served(victim).length, 0);
    assert.equal(served(stale).length, 0);
    // The log names the reason once per distinct reason, never the secret.
    const warnings = gw.logs.filter((l) => l.msg === 'url challenge failed; the replica stays joining' && l.replica === v.id);
    assert.equal(warnings.length, 1);
    assert.ok(!JSON.stringify(gw.logs).includes(a.json.secret), 'the secret is never logged');

    // The agent behind the URL gets its secret (late, like an agent still starting): it passes
    // at the next attempt and joins.
    victim.setChallengeSecret(a.json.secret);
    await waitForState(gw, victim.url, 'healthy', { timeoutMs: 10000 });
    await eventually(async () => {
      await chat(gw, 'm');
      return served(victim).length > 0;
    }, { timeoutMs: 5000, what: 'traffic to the proven replica' });
    assert.ok(gw.logs.some((l) => l.msg === 'url challenge passed' && l.replica === v.id));
    const last = victim.challenges.at(-1);
    assert.equal(last.status, 200);
    assert.equal(challengeHmac(a.json.secret, last.nonce).length, 64);
    assert.equal((await replicaByUrl(gw, stale.url)).state, 'joining', 'the stale one still waits');
  });

  test('a registration on a URL nobody listens on stays joining with the reason', async () => {
    const gone = await fake('gone');
    const url = gone.url;
    await gone.close();
    const res = await rawRegister(gw, { url, model: 'm', slots: 1 });
    assert.equal(res.status, 200, res.text);
    const r = await waitForReplica(gw, url, (x) => x?.state_reason === 'url_challenge_failed: connect', { timeoutMs: 5000 });
    assert.equal(r.state, 'joining', 'failed probes do not move it either: the challenge decides first');
  });
});

describe('URL challenge switched off', () => {
  let phone;
  let gw;

  before(async () => {
    phone = await startFakeReplica({ name: 'phone' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { ...REGISTRATION, url_challenge: false },
      health: FAST_HEALTH,
      models: [{ name: 'm', replicas: 1, endpoints: [] }],
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    await gw?.stop();
    await phone?.close();
  });

  test('registration.url_challenge: false routes a URL proven by probes alone', async () => {
    const res = await rawRegister(gw, body(phone));
    assert.equal(res.status, 200, res.text);
    await waitForState(gw, phone.url, 'healthy', { timeoutMs: 5000 });
    assert.equal(phone.challenges.length, 0, 'no challenge was fetched');
  });
});
