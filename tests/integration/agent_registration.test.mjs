// fleetgate-agent registering with a gateway: against a fake gateway (registration body and
// token, the replica secret sent back on heartbeats and the deregistration, heartbeats at the
// returned interval, re-registration after a 404 or a refused secret, back-off while the gateway
// is down without ever stopping serving, deregistration on SIGTERM) and against the real
// fleetgate (it joins, receives traffic through the gateway, and SIGTERM drains and removes it).
//
// Binaries: $FLEETGATE_AGENT_BIN and $FLEETGATE_BIN (default build/bin/...).
import { test, describe, before, after } from 'node:test';
import crypto from 'node:crypto';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { REPO_ROOT, eventually, request, startGateway } from './lib/gateway.mjs';
import { ADMIN_TOKEN, FAST_HEALTH, REGISTRATION_TOKEN, TOKEN_ENV, replicaByUrl, waitForState } from './lib/lifecycle_util.mjs';
import { startAgent as launchAgent, stopAgent, freePort, listenOutsideEphemeral } from './lib/agent.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN ?? path.join(REPO_ROOT, 'build/bin/fleetgate-agent');
const MODEL = 'qwen3.5-test';

const startAgent = (args, env = {}) => launchAgent(args, { env });


const chat = (content = 'is this a fraud?') => ({ model: MODEL, messages: [{ role: 'user', content }] });

// A fake gateway admin listener: /admin/v1/replicas/register, /{id}/heartbeat, /{id}/deregister.
// Registration hands out a secret; heartbeats and the deregistration must send it back.
class FakeGateway {
  constructor({ intervalS = 0.3 } = {}) {
    this.intervalS = intervalS;
    this.calls = []; // {kind, id, auth, secret, body, at (received), answeredAt}
    this.known = new Map(); // id -> secret
    this.next = 1;
    this.server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => this.answer(req, res, body));
    });
  }

  // A port below the ephemeral range: the "gateway is down" test closes it and listens on it
  // again, and meanwhile nothing else may be given it (lib/agent.mjs, listenOutsideEphemeral).
  async listen(port = 0) {
    if (port === 0) {
      await listenOutsideEphemeral(this.server);
    } else {
      this.server.listen(port, '127.0.0.1');
      await once(this.server, 'listening');
    }
    this.port = this.server.address().port;
    this.url = `http://127.0.0.1:${this.port}`;
  }

  async close() {
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }

  of(kind) {
    return this.calls.filter((c) => c.kind === kind);
  }

  answer(req, res, body) {
    let call = null;
    const send = (status, json) => {
      if (call) {
        call.answeredAt = Date.now(); // before the bytes go out: the agent cannot have them sooner
      }
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(json));
    };
    const auth = req.headers.authorization;
    const m = /^\/admin\/v1\/replicas\/(?:(register)|([^/]+)\/(heartbeat|deregister))$/.exec(req.url);
    if (req.method !== 'POST' || !m) {
      return send(404, { error: { message: 'no route' } });
    }
    const kind = m[1] ?? m[3];
    const id = m[2];
    const secret = req.headers['fleetgate-replica-secret'];
    call = { kind, id, auth, secret, body: body ? JSON.parse(body) : null, at: Date.now(), answeredAt: null };
    this.calls.push(call);
    if (auth !== `Bearer ${REGISTRATION_TOKEN}`) {
      return send(401, { error: { message: 'bad token' } });
    }
    if (kind === 'register') {
      const newId = `r${this.next++}`;
      const newSecret = crypto.randomBytes(32).toString('hex');
      this.known.set(newId, newSecret);
      return send(200, { id: newId, secret: newSecret, heartbeat_interval_s: this.intervalS });
    }
    if (!this.known.has(id)) {
      return send(404, { error: { message: 'unknown replica' } });
    }
    if (secret !== this.known.get(id)) {
      return send(403, { error: { message: 'wrong replica secret', code: 'invalid_replica_secret' } });
    }
    if (kind === 'deregister') {
      this.known.delete(id);
      return send(202, { id });
    }
    return send(200, { id, state: 'healthy' });
  }
}

describe('registration with a fake gateway', () => {
  let gateway;
  let agent;
  let port;
  const agentArgs = (gatewayUrl) => [
    '--listen', `127.0.0.1:${port}`, '--model', MODEL, '--slots', '1',
    '--public-url', `http://127.0.0.1:${port}`, '--gateway-url', gatewayUrl,
    '--gateway-token-env', 'FG_IT_REGISTRATION_TOKEN', '--drain-timeout', '5',
  ];

  after(async () => {
    stopAgent(agent);
    await gateway?.close().catch(() => {});
  });

  test('registers with its URL, model, slots, version and device facts, then heartbeats', async () => {
    gateway = new FakeGateway();
    await gateway.listen();
    port = await freePort();
    agent = await startAgent(agentArgs(gateway.url), TOKEN_ENV);
    await eventually(() => gateway.of('heartbeat').length >= 3, { timeoutMs: 5000, what: 'three heartbeats' });
    const [reg] = gateway.of('register');
    assert.equal(reg.auth, `Bearer ${REGISTRATION_TOKEN}`);
    assert.equal(reg.secret, undefined, 'a first registration has no secret to send');
    assert.equal(reg.body.url, `http://127.0.0.1:${port}`);
    assert.equal(reg.body.model, MODEL);
    assert.equal(reg.body.slots, 1);
    assert.match(reg.body.agent_version, /^\d+\.\d+\.\d+/);
    assert.ok(reg.body.device.ram_bytes > 0);
    assert.ok(reg.body.device.cpu_cores > 0);
    assert.equal(typeof reg.body.device.cpu_model, 'string');
    const beats = gateway.of('heartbeat');
    assert.ok(beats.every((b) => b.id === 'r1' && b.auth === `Bearer ${REGISTRATION_TOKEN}`));
    assert.ok(beats.every((b) => b.secret === gateway.known.get('r1')), 'each heartbeat carries the secret');
    // At the returned interval: the agent waits 300 ms after each answer, so a heartbeat never
    // arrives sooner than 300 ms after the previous one was answered, however loaded the machine
    // (a later one is the load; gaps between arrivals would count the load of this process too).
    const gaps = beats.slice(1).map((b, i) => b.at - beats[i].answeredAt);
    assert.ok(gaps.every((g) => g >= 299), `heartbeats 300 ms after the previous answer: ${gaps}`);
    assert.ok(agent.logs.some((l) => l.msg === 'registered with the gateway' && l.heartbeat_interval_ms === 300));
    assert.ok(!agent.logs.some((l) => JSON.stringify(l).includes(gateway.known.get('r1'))), 'the secret is never logged');
    const h = (await request(`${agent.base}/health`)).json;
    assert.deepEqual(h.device, reg.body.device, '/health shows the same device facts');
  });

  test('a heartbeat answered 404 (gateway restarted) makes it register again', async () => {
    gateway.known.clear();
    const registrations = gateway.of('register').length;
    await eventually(() => gateway.of('register').length > registrations, { timeoutMs: 3000, what: 'a new registration' });
    await eventually(() => gateway.of('heartbeat').some((b) => b.id === 'r2'), { timeoutMs: 3000, what: 'heartbeats with the new id' });
    assert.ok(agent.logs.some((l) => /registering again/.test(l.msg ?? '')));
    const again = gateway.of('register').at(-1);
    assert.equal(again.secret, undefined, 'the forgotten registration\'s secret is not sent');
    assert.ok(gateway.of('heartbeat').filter((b) => b.id === 'r2').every((b) => b.secret === gateway.known.get('r2')));
  });

  test('a heartbeat answered 403 (its secret no longer valid) makes it register again', async () => {
    const id = gateway.of('register').length;
    const current = `r${id}`;
    gateway.known.set(current, 'a-secret-the-agent-does-not-have');
    await eventually(() => gateway.of('register').length > id, { timeoutMs: 3000, what: 'a new registration' });
    assert.ok(agent.logs.some((l) => /refused this replica's secret/.test(l.msg ?? '')));
    assert.equal(gateway.of('register').at(-1).secret, undefined);
    const next = `r${gateway.of('register').length}`;
    await eventually(() => gateway.of('heartbeat').some((b) => b.id === next && b.secret === gateway.known.get(next)), {
      timeoutMs: 3000, what: 'heartbeats under the new registration',
    });
  });

  test('while the gateway is down it keeps serving and backs off; it comes back by itself', async () => {
    const gatewayPort = gateway.port;
    await gateway.close();
    const mark = agent.logs.length;
    for (let i = 0; i < 3; ++i) {
      const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
      assert.equal(res.status, 200, 'serving never depends on the gateway');
    }
    const failures = () => agent.logs.slice(mark).filter((l) => l.msg === 'heartbeat failed');
    await eventually(() => failures().length >= 3, { timeoutMs: 10000, what: 'three failed heartbeats' });
    // Backing off: the waits after the first and second failure are at least 0.5 s and 1 s
    // (half of the 1 s, 2 s steps; every 300 ms would mean no back-off).
    const at = failures().map((l) => Date.parse(l.ts));
    assert.ok(at[1] - at[0] >= 450, `after the first failure: ${at[1] - at[0]} ms`);
    assert.ok(at[2] - at[1] >= 950, `after the second failure: ${at[2] - at[1]} ms`);
    // The same port again, and a gateway that forgot everything (a restart).
    gateway = new FakeGateway();
    await gateway.listen(gatewayPort);
    await eventually(() => gateway.of('register').length >= 1, { timeoutMs: 12000, what: 'registration after the gateway came back' });
    await eventually(() => gateway.of('heartbeat').length >= 1, { timeoutMs: 3000, what: 'heartbeats again' });
  });

  test('SIGTERM: drains, deregisters, exits 0', async () => {
    const id = gateway.of('register').at(-1).id ?? null;
    process.kill(agent.proc.pid, 'SIGTERM');
    const [code] = await agent.exited;
    assert.equal(code, 0);
    const dereg = gateway.of('deregister');
    assert.equal(dereg.length, 1, 'one deregistration');
    assert.equal(dereg[0].auth, `Bearer ${REGISTRATION_TOKEN}`);
    assert.ok(dereg[0].secret, 'with the secret');
    assert.ok(gateway.known.size === 0, `the gateway forgot it (${id})`);
    assert.ok(agent.logs.some((l) => l.msg === 'deregistered from the gateway'));
  });

  test('an unreachable gateway at start does not stop the agent from serving', async () => {
    const deadPort = await freePort();
    port = await freePort();
    const lonely = await startAgent(agentArgs(`http://127.0.0.1:${deadPort}`), TOKEN_ENV);
    try {
      const res = await request(`${lonely.base}/v1/chat/completions`, { method: 'POST', body: chat() });
      assert.equal(res.status, 200);
      await eventually(() => lonely.logs.filter((l) => l.msg === 'registration failed').length >= 2, {
        timeoutMs: 5000, what: 'registration retried',
      });
      // SIGTERM without a registration: nothing to deregister, still exits 0 at once.
      process.kill(lonely.proc.pid, 'SIGTERM');
      const [code] = await lonely.exited;
      assert.equal(code, 0);
    } finally {
      stopAgent(lonely);
    }
  });
});

describe('registration with the real gateway', () => {
  let gw;
  let agent;
  let port;

  before(async () => {
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: {
        token_env: 'FG_IT_REGISTRATION_TOKEN',
        allowed_urls: ['http://127.0.0.1:*'],
        heartbeat_interval: '1s',
      },
      health: FAST_HEALTH,
      models: [{ name: MODEL, endpoints: [] }],
      routing: { queue_timeout: '10s' },
    }, { env: TOKEN_ENV });
  });

  after(async () => {
    stopAgent(agent);
    await gw?.stop();
  });

  test('an agent registers, becomes healthy and serves traffic through the gateway', async () => {
    port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    agent = await startAgent([
      '--listen', `127.0.0.1:${port}`, '--model', MODEL, '--profile', 'qwen3.5-0.8b/snapdragon-8-elite',
      '--time-scale', '50', '--public-url', url, '--gateway-url', gw.adminUrl,
      '--gateway-token-env', 'FG_IT_REGISTRATION_TOKEN', '--drain-timeout', '10',
    ], TOKEN_ENV);
    await waitForState(gw, url, 'healthy', { timeoutMs: 8000 });
    const entry = await replicaByUrl(gw, url);
    assert.equal(entry.source, 'registration');
    assert.equal(entry.slots, 4, 'the profile\'s 4 slots');
    assert.ok(entry.device.ram_bytes > 0, JSON.stringify(entry.device));
    for (let i = 0; i < 4; ++i) {
      const res = await request(`${gw.publicUrl}/v1/chat/completions`, { method: 'POST', body: chat(`case ${i}`) });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json.object, 'chat.completion');
    }
    await eventually(() => agent.logs.filter((l) => l.msg === 'request' && l.status === 200).length === 4, {
      timeoutMs: 2000, what: 'the agent serving the 4 requests',
    });
  });

  test('SIGTERM drains in-flight requests, deregisters, and the replica is gone', async () => {
    const url = `http://127.0.0.1:${port}`;
    // 50,000 prompt tokens: about 2 s of prefill on the 0.8B profile at time_scale 50, so the
    // drain has a request to wait for.
    const long = request(`${gw.publicUrl}/v1/chat/completions`, {
      method: 'POST', body: chat('y'.repeat(200000)), timeoutMs: 20000,
    });
    await eventually(async () => (await request(`${agent.base}/health`)).json?.slots_idle < 4, { timeoutMs: 3000, what: 'the request in flight' });
    process.kill(agent.proc.pid, 'SIGTERM');
    const res = await long;
    assert.equal(res.status, 200, 'the in-flight request completed');
    const [code] = await agent.exited;
    assert.equal(code, 0);
    assert.ok(agent.logs.some((l) => l.msg === 'deregistered from the gateway'), JSON.stringify(agent.logs.slice(-5)));
    await eventually(async () => (await replicaByUrl(gw, url)) === undefined, { timeoutMs: 5000, what: 'the replica removed from GET /admin/v1/replicas' });
    assert.ok(ADMIN_TOKEN);
  });
});
