// The server layer under attack and misuse (issue 11, items 4, 5, 8 and 10, server side): slow
// and idle clients are cut by their own timeouts; refusals (key, route, method, size) are answered
// from the head before any body is read, with no 100 Continue, on the public listener, the admin
// listener and the agent; connection caps (total and per client address) close new connections
// at once and are counted; a flood of client connections never starves the phone probes; a client
// that stops reading is dropped and its phone slot freed; the bearer scheme is case-insensitive;
// secrets with control characters are refused at start; admin.tls serves registration and the
// admin API over HTTPS.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { AGENT_BIN, freePort, startAgent, stopAgent } from './lib/agent.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import {
  FLEETGATE_BIN, eventually, makeTempDir, makeTestCerts, removeDir, request, startGateway, stopChecked, toYaml,
} from './lib/gateway.mjs';
import { ADMIN_TOKEN, FAST_HEALTH, REGISTRATION_TOKEN, TOKEN_ENV, reload, rewriteConfig } from './lib/lifecycle_util.mjs';
import { openFileLimits, rawConnect, startGatewayWithFileLimit } from './lib/raw_client.mjs';

const KEY = 'sk-hardening-7f3a';
const KEY_ENV = { FG_IT_KEYS: KEY };
const AUTH = `Bearer ${KEY}`;
const CHAT = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });

function post(path, body, headers = {}) {
  let head = `POST ${path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
  for (const [name, value] of Object.entries(headers)) {
    head += `${name}: ${value}\r\n`;
  }
  return `${head}\r\n${body}`;
}

// Sends a head that announces a body and never sends the body: only an answer given from the
// head can come back. Checks the status, that no 100 Continue came, and that the connection
// closes (the body was never read); returns the response text.
async function refusedFromHead(url, head, status) {
  const c = await rawConnect(url);
  try {
    await c.write(head);
    const got = await c.head({ timeoutMs: 5000 });
    assert.match(got, new RegExp(`^HTTP/1\\.1 ${status} `), `${JSON.stringify(head.slice(0, 60))} got ${JSON.stringify(got)}`);
    assert.ok(!c.received.includes('100 Continue'), 'no 100 Continue for a refused request');
    assert.match(got, /\r\nConnection: close/i);
    assert.ok(await c.closedWithin(5000), 'the connection closes: its body was never read');
    return c.received;
  } finally {
    c.destroy();
  }
}

describe('slow and idle clients', () => {
  let replica;
  let headGw; // header_timeout 1s (the body's is long)
  let bodyGw; // body_timeout 1s (the header's is long)

  before(async () => {
    replica = await startFakeReplica({ name: 'slow' });
    const models = [{ name: 'm', endpoints: [replica.url] }];
    headGw = await startGateway({
      server: { api_keys_env: 'FG_IT_KEYS', header_timeout: '1s', body_timeout: '30s', idle_timeout: '1s' }, models,
    }, { env: KEY_ENV });
    bodyGw = await startGateway({
      server: { api_keys_env: 'FG_IT_KEYS', header_timeout: '30s', body_timeout: '1s', idle_timeout: '30s' }, models,
    }, { env: KEY_ENV });
  });
  after(async () => {
    await stopChecked(headGw);
    await stopChecked(bodyGw);
    await replica?.close();
  });

  test('a client trickling its headers is cut at server.header_timeout, however often it sends', async () => {
    const c = await rawConnect(headGw.publicUrl);
    await c.write('POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n');
    // A byte every 100 ms: every read comes well within the timeout, so only a deadline counted
    // from the request's first byte cuts it.
    const trickle = setInterval(() => c.write('X'), 100);
    try {
      assert.ok(await c.closedWithin(10000), 'the gateway closed the connection');
    } finally {
      clearInterval(trickle);
      c.destroy();
    }
    assert.equal(c.received, '', 'a slow client is cut, not answered');
    await headGw.waitForMetric('fleetgate_requests_refused_total', { listener: 'public', reason: 'header_timeout' }, (v) => v === 1);
  });

  test('a client trickling its body is cut at server.body_timeout', async () => {
    const before = replica.requests.length;
    const c = await rawConnect(bodyGw.publicUrl);
    await c.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAuthorization: ${AUTH}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
    const trickle = setInterval(() => c.write(' '), 100);
    try {
      assert.ok(await c.closedWithin(10000), 'the gateway closed the connection');
    } finally {
      clearInterval(trickle);
      c.destroy();
    }
    assert.equal(c.received, '');
    assert.equal(replica.requests.length, before, 'nothing reached the phone');
    await bodyGw.waitForMetric('fleetgate_requests_refused_total', { listener: 'public', reason: 'body_timeout' }, (v) => v === 1);
  });

  test('an idle keep-alive connection is closed after server.idle_timeout', async () => {
    const c = await rawConnect(headGw.publicUrl);
    try {
      await c.write(`GET /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: ${AUTH}\r\n\r\n`);
      const head = await c.head();
      assert.match(head, /^HTTP\/1\.1 200 /);
      assert.doesNotMatch(head, /Connection: close/i, 'kept alive');
      assert.ok(await c.closedWithin(10000), 'closed once idle');
    } finally {
      c.destroy();
    }
  });
});

describe('the public listener answers refusals from the head', () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'head' });
    gw = await startGateway({
      server: { api_keys_env: 'FG_IT_KEYS', max_body_bytes: 65536, body_timeout: '30s' },
      models: [{ name: 'm', endpoints: [replica.url] }],
    }, { env: KEY_ENV });
  });
  after(async () => {
    await stopChecked(gw);
    await replica?.close();
  });

  const announce = (path, headers, length = 3000000, method = 'POST') => {
    let head = `${method} ${path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n`;
    for (const [name, value] of Object.entries(headers)) {
      head += `${name}: ${value}\r\n`;
    }
    return `${head}\r\n`;
  };

  test('a missing or wrong key is 401 before the body: no 100 Continue, nothing buffered', async () => {
    const text = await refusedFromHead(gw.publicUrl,
      announce('/v1/chat/completions', { Authorization: 'Bearer wrong', Expect: '100-continue' }), 401);
    assert.match(text, /WWW-Authenticate: Bearer/);
    assert.match(text, /"code":"invalid_api_key"/);
    await refusedFromHead(gw.publicUrl, announce('/v1/chat/completions', { Expect: '100-continue' }, 1000), 401);
    await refusedFromHead(gw.publicUrl, announce('/v1/chat/completions', { Authorization: 'Bearer wrong' }, 1000), 401);
    await gw.waitForMetric('fleetgate_requests_refused_total', { listener: 'public', reason: 'invalid_api_key' }, (v) => v === 3);
  });

  test('an unknown route (404), a wrong method (405) and a declared body over the limit (413) too', async () => {
    await refusedFromHead(gw.publicUrl, announce('/v1/nothing-here', { Authorization: AUTH }, 1000), 404);
    await refusedFromHead(gw.publicUrl, announce('/v2/chat/completions', {}, 1000), 404);
    const text = await refusedFromHead(gw.publicUrl, announce('/v1/chat/completions', { Authorization: AUTH }, 1000, 'PUT'), 405);
    assert.match(text, /Allow: POST/);
    await refusedFromHead(gw.publicUrl, announce('/v1/chat/completions', { Authorization: AUTH, Expect: '100-continue' }, 65537), 413);
  });

  test('a valid request asking for 100 Continue gets it, then its answer', async () => {
    const c = await rawConnect(gw.publicUrl);
    try {
      await c.write(announce('/v1/chat/completions', { Authorization: AUTH, Expect: '100-continue' }, Buffer.byteLength(CHAT)));
      await c.waitFor((t) => t.startsWith('HTTP/1.1 100 Continue\r\n\r\n'), { what: '100 Continue' });
      await c.write(CHAT);
      await c.waitFor((t) => t.includes('HTTP/1.1 200 '), { what: 'the answer' });
    } finally {
      c.destroy();
    }
  });

  test('the bearer scheme is case-insensitive', async () => {
    for (const scheme of ['bearer', 'BEARER', 'Bearer']) {
      const res = await request(`${gw.publicUrl}/v1/chat/completions`, { method: 'POST', headers: { Authorization: `${scheme} ${KEY}` }, body: CHAT });
      assert.equal(res.status, 200, `${scheme}: ${res.text}`);
    }
    const res = await request(`${gw.publicUrl}/v1/models`, { headers: { Authorization: `Bearer ${KEY.toUpperCase()}` } });
    assert.equal(res.status, 401, 'the key itself is compared exactly');
  });

  test('no refused request reached the phone', () => {
    assert.equal(replica.requests.length, 4, 'only the valid requests');
  });
});

describe('the agent answers refusals from the head', () => {
  let agent;

  before(async () => {
    agent = await startAgent(['--listen', '127.0.0.1:0', '--model', 'm', '--api-key-env', 'FG_IT_AGENT_KEY'], {
      env: { FG_IT_AGENT_KEY: 'agent-key-1' },
    });
  });
  after(() => stopAgent(agent));

  test('a wrong key is 401 before the body', async () => {
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer nope\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n';
    const text = await refusedFromHead(agent.base, head, 401);
    assert.match(text, /"code":"invalid_api_key"/);
  });

  test('the bearer scheme is case-insensitive; nested JSON is refused', async () => {
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', headers: { Authorization: 'bearer agent-key-1' }, body: CHAT });
    assert.equal(res.status, 200, res.text);
    const deep = `{"model":"m","messages":${'['.repeat(100000)}${']'.repeat(100000)}}`;
    const bad = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', headers: { Authorization: 'Bearer agent-key-1' }, body: deep });
    assert.equal(bad.status, 400, bad.text);
    assert.equal((await request(`${agent.base}/health`)).status, 200, 'still serving');
  });
});

describe('the admin listener checks its tokens from the head', () => {
  let gw;
  let phone;

  before(async () => {
    phone = await startFakeReplica({ name: 'registering' });
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { token_env: 'FG_IT_REGISTRATION_TOKEN', allowed_urls: ['http://127.0.0.1:*'] },
      models: [{ name: 'm', endpoints: [] }],
    }, { env: TOKEN_ENV });
  });
  after(async () => {
    await stopChecked(gw);
    await phone?.close();
  });

  test('registration with a wrong token is 401 before the body', async () => {
    const head = 'POST /admin/v1/replicas/register HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer wrong\r\nContent-Type: application/json\r\nContent-Length: 50000\r\n\r\n';
    await refusedFromHead(gw.adminUrl, head, 401);
    await refusedFromHead(gw.adminUrl, head.replace('Authorization: Bearer wrong\r\n', ''), 401);
  });

  test('an admin call with a wrong token is 401 before the body', async () => {
    const head = `POST /admin/v1/replicas/r1/drain HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${ADMIN_TOKEN}x\r\nContent-Length: 1000\r\n\r\n`;
    await refusedFromHead(gw.adminUrl, head, 401);
    await gw.waitForMetric('fleetgate_requests_refused_total', { listener: 'admin', reason: 'invalid_token' }, (v) => v === 3);
  });

  test('both tokens work with any case of the scheme', async () => {
    const body = { url: phone.url, model: 'm', slots: 1, agent_version: 'it', device: {} };
    const reg = await request(`${gw.adminUrl}/admin/v1/replicas/register`, {
      method: 'POST', headers: { Authorization: `bearer ${REGISTRATION_TOKEN}` }, body,
    });
    assert.ok(reg.status === 200 || reg.status === 201, `${reg.status} ${reg.text}`);
    const list = await request(`${gw.adminUrl}/admin/v1/replicas`, { headers: { Authorization: `BEARER ${ADMIN_TOKEN}` } });
    assert.equal(list.status, 200, list.text);
    assert.ok(list.json.replicas.some((r) => r.url === phone.url));
  });
});

describe('connection caps', () => {
  let gw; // max_connections 4
  let perIp; // max_connections_per_ip 2

  before(async () => {
    gw = await startGateway({ server: { max_connections: 4, max_connections_per_ip: 0 }, models: [{ name: 'm', endpoints: [] }] });
    perIp = await startGateway({ server: { max_connections: 100, max_connections_per_ip: 2 }, models: [{ name: 'm', endpoints: [] }] });
  });
  after(async () => {
    await stopChecked(gw);
    await stopChecked(perIp);
  });

  const GET_MODELS = 'GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n';

  test('over server.max_connections a new connection is closed at once, counted and logged once per burst', async () => {
    const held = [];
    try {
      for (let i = 0; i < 4; ++i) {
        held.push(await rawConnect(gw.publicUrl));
      }
      await gw.waitForMetric('fleetgate_connections_open', { listener: 'public' }, (v) => v === 4);
      for (let i = 0; i < 3; ++i) {
        const c = await rawConnect(gw.publicUrl);
        await c.write(GET_MODELS);
        assert.ok(await c.closedWithin(5000), 'a connection over the cap is closed');
        assert.equal(c.received, '', 'closed without an answer');
        c.destroy();
      }
      await gw.waitForMetric('fleetgate_connections_rejected_total', { listener: 'public', reason: 'max_connections' }, (v) => v === 3);
      const lines = gw.logs.filter((l) => l.msg === 'connection refused: too many open connections');
      assert.ok(lines.length >= 1 && lines.length < 3, `a burst is logged without a line per connection (${lines.length})`);
      assert.equal(lines[0].reason, 'max_connections');
      // The admin listener has its own cap: it still answers (waitForMetric used it too).
      assert.equal((await request(`${gw.adminUrl}/healthz`)).status, 200);
      // A place that frees is usable again.
      held.shift().destroy();
      await eventually(async () => {
        const res = await request(`${gw.publicUrl}/v1/models`).catch(() => null);
        return res?.status === 200;
      }, { timeoutMs: 5000, what: 'a request after a place freed' });
    } finally {
      held.forEach((c) => c.destroy());
    }
  });

  test('a reload applies new caps to new connections; caps that do not fit are refused', async () => {
    rewriteConfig(gw, { server: { max_connections: 1, max_connections_per_ip: 0 }, models: [{ name: 'm', endpoints: [] }] });
    assert.equal((await reload(gw)).msg, 'configuration reloaded');
    const first = await rawConnect(gw.publicUrl);
    try {
      await gw.waitForMetric('fleetgate_connections_open', { listener: 'public' }, (v) => v === 1);
      const second = await rawConnect(gw.publicUrl);
      assert.ok(await second.closedWithin(5000), 'the second connection is over the new cap');
      second.destroy();
    } finally {
      first.destroy();
    }
    rewriteConfig(gw, { server: { max_connections: 4000000000 }, models: [{ name: 'm', endpoints: [] }] });
    const refused = await reload(gw);
    assert.match(refused.msg, /^reload refused/);
    assert.match(refused.error, /server\.max_connections/);
  });

  test('over server.max_connections_per_ip that address is refused, others are not', async () => {
    const held = [];
    try {
      for (let i = 0; i < 2; ++i) {
        held.push(await rawConnect(perIp.publicUrl));
      }
      await perIp.waitForMetric('fleetgate_connections_open', { listener: 'public' }, (v) => v === 2);
      const third = await rawConnect(perIp.publicUrl);
      await third.write(GET_MODELS);
      assert.ok(await third.closedWithin(5000), 'the third from 127.0.0.1 is closed');
      third.destroy();
      // All of 127.0.0.0/8 is loopback on Linux: 127.0.0.2 is another client address.
      const other = await rawConnect(perIp.publicUrl, { localAddress: '127.0.0.2' });
      held.push(other);
      await other.write(GET_MODELS);
      assert.match(await other.head(), /^HTTP\/1\.1 200 /);
      await perIp.waitForMetric('fleetgate_connections_rejected_total', { listener: 'public', reason: 'max_connections_per_ip' }, (v) => v === 1);
    } finally {
      held.forEach((c) => c.destroy());
    }
  });
});

describe('file descriptors', () => {
  let dir;

  before(() => {
    dir = makeTempDir('fleetgate-fd-check-');
  });
  after(() => removeDir(dir));

  const base = (extra = {}) => ({
    server: { listen: '127.0.0.1:0', drain_timeout: '3s', ...(extra.server ?? {}) },
    admin: { listen: '127.0.0.1:0' },
    log: { level: 'info' },
    models: extra.models ?? [{ name: 'm', endpoints: [] }],
    ...(extra.health ? { health: extra.health } : {}),
  });

  test('the soft limit is raised to the hard limit at start', async () => {
    const gw = await startGatewayWithFileLimit(base({ server: { max_connections: 100 } }), { soft: 512, hard: 4096 });
    try {
      assert.deepEqual(openFileLimits(gw.pid), { soft: 4096, hard: 4096 });
    } finally {
      await stopChecked(gw);
    }
  });

  test('caps that cannot fit the descriptor limit are refused at start, naming server.max_connections', () => {
    const configPath = path.join(dir, 'too-many.yaml');
    fs.writeFileSync(configPath, toYaml(base({ server: { max_connections: 5000 } })));
    const r = spawnSync('prlimit', ['--nofile=1024:1024', FLEETGATE_BIN, '--config', configPath], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 1, `exit code (stderr: ${r.stderr})`);
    assert.match(r.stderr, /server\.max_connections/);
    assert.match(r.stderr, /RLIMIT_NOFILE/);
    assert.match(r.stderr, /at most \d+/);
  });

  test('a flood of client connections never makes a healthy phone look unhealthy', async () => {
    const phone = await startFakeReplica({ name: 'flooded' });
    // 300 client connections + the admin cap + the reserve fit in 1024 descriptors; 1,100 client
    // connections would not.
    const gw = await startGatewayWithFileLimit(base({
      server: { max_connections: 300 },
      health: { interval: '100ms', timeout: '80ms', unhealthy_after: 2, healthy_after: 1, eject_after: 3 },
      models: [{ name: 'm', endpoints: [phone.url] }],
    }), { soft: 1024, hard: 1024 });
    const flood = [];
    try {
      for (let i = 0; i < 11; ++i) {
        flood.push(...(await Promise.all(Array.from({ length: 100 }, () => rawConnect(gw.publicUrl)))));
      }
      await gw.waitForMetric('fleetgate_connections_open', { listener: 'public' }, (v) => v === 300, { timeoutMs: 10000 });
      await gw.waitForMetric('fleetgate_connections_rejected_total', { listener: 'public', reason: 'max_connections' }, (v) => v === 800, { timeoutMs: 10000 });
      const seen = phone.probes.length;
      await eventually(() => phone.probes.length >= seen + 5, { timeoutMs: 5000, what: 'five more probes during the flood' });
      assert.equal(await gw.metric('fleetgate_replicas', { model: 'm', state: 'healthy' }), 1, 'the phone stays healthy');
      assert.ok(!gw.logs.some((l) => l.msg === 'accept failed'), 'the gateway never ran out of descriptors');
      flood.splice(0).forEach((c) => c.destroy());
      await eventually(async () => {
        const res = await request(`${gw.publicUrl}/v1/chat/completions`, { method: 'POST', body: CHAT }).catch(() => null);
        return res?.status === 200;
      }, { timeoutMs: 5000, what: 'a request once the flood is gone' });
    } finally {
      flood.forEach((c) => c.destroy());
      await stopChecked(gw);
      await phone.close();
    }
  });
});

describe('a client that stops reading its stream', () => {
  let phone;
  let gw;

  before(async () => {
    phone = await startFakeReplica({ name: 'firehose' });
    gw = await startGateway({
      server: { write_timeout: '1s' },
      routing: { queue_timeout: '3s' },
      models: [{ name: 'm', endpoints: [{ url: phone.url, slots: 1 }] }],
    });
  });
  after(async () => {
    await stopChecked(gw);
    await phone?.close();
  });

  test('is dropped after server.write_timeout and its phone slot freed at once', async () => {
    // About 20 MB of events at once: more than the socket buffers of both sides hold.
    const body = JSON.stringify({
      model: 'm', stream: true, messages: [{ role: 'user', content: 'firehose' }],
      fake: { type: 'stream', chunks: 100000, intervalMs: 0 },
    });
    const reader = await rawConnect(gw.publicUrl);
    try {
      reader.socket.pause(); // never reads
      await reader.write(post('/v1/chat/completions', body));
      // The fake queues its whole answer at once, so it counts as finished: the gateway's request
      // line says how the stalled stream ended.
      const line = await gw.waitForLog((l) => l.msg === 'request' && l.outcome === 'client_gone', {
        timeoutMs: 30000, what: 'the stalled stream dropped',
      });
      assert.equal(line.status, 200, 'the stream had started');
      // slots: 1, so a second request is served only if that slot was freed (otherwise it would
      // wait in the queue and get 503 after routing.queue_timeout).
      const res = await request(`${gw.publicUrl}/v1/chat/completions`, { method: 'POST', body: CHAT });
      assert.equal(res.status, 200, res.text);
      await gw.waitForMetric('fleetgate_session_failures_total', { listener: 'public', kind: 'write_timeout' }, (v) => v === 1);
    } finally {
      reader.destroy();
    }
  });
});

describe('secrets from the environment', () => {
  let dir;
  const BAD = { FG_IT_BAD: 'sk-good\r\nX-Injected: 1' };

  before(() => {
    dir = makeTempDir('fleetgate-secrets-');
  });
  after(() => removeDir(dir));

  const cases = [
    ['server.api_keys_env', { server: { api_keys_env: 'FG_IT_BAD' } }],
    ['upstream.api_key_env', { upstream: { api_key_env: 'FG_IT_BAD' } }],
    ['admin.token_env', { admin: { token_env: 'FG_IT_BAD' } }],
    ['registration.token_env', { registration: { token_env: 'FG_IT_BAD', allowed_urls: ['http://127.0.0.1:*'] } }],
  ];
  for (const [key, extra] of cases) {
    test(`the gateway refuses to start when ${key} names a variable with CR/LF, naming it`, () => {
      const config = {
        server: { listen: '127.0.0.1:0', ...(extra.server ?? {}) },
        admin: { listen: '127.0.0.1:0', ...(extra.admin ?? {}) },
        models: [{ name: 'm', endpoints: [] }],
        ...(extra.upstream ? { upstream: extra.upstream } : {}),
        ...(extra.registration ? { registration: extra.registration } : {}),
      };
      const configPath = path.join(dir, `${key}.yaml`);
      fs.writeFileSync(configPath, toYaml(config));
      const r = spawnSync(FLEETGATE_BIN, ['--config', configPath], { encoding: 'utf8', timeout: 10000, env: { ...process.env, ...BAD } });
      assert.equal(r.status, 1, `exit code (stderr: ${r.stderr})`);
      assert.match(r.stderr, new RegExp(`${key.replace('.', '\\.')}: the environment variable FG_IT_BAD contains a control character`));
      assert.ok(!r.stderr.includes('sk-good'), 'the secret is not printed');
    });
  }

  for (const [key, args] of [
    ['api_key_env', ['--api-key-env', 'FG_IT_BAD']],
    ['gateway.token_env', ['--public-url', 'http://127.0.0.1:1', '--gateway-url', 'http://127.0.0.1:2', '--gateway-token-env', 'FG_IT_BAD']],
  ]) {
    test(`the agent refuses to start when ${key} names a variable with CR/LF, naming it`, () => {
      const r = spawnSync(AGENT_BIN, ['--listen', '127.0.0.1:0', '--model', 'm', ...args], {
        encoding: 'utf8', timeout: 10000, env: { ...process.env, ...BAD },
      });
      assert.equal(r.status, 1, `exit code (stderr: ${r.stderr})`);
      assert.match(r.stderr, new RegExp(`${key.replace('.', '\\.')}: the environment variable FG_IT_BAD contains a control character`));
    });
  }
});

describe('admin.tls: registration and the admin API over HTTPS', () => {
  let dir;
  let certs;
  let gw;
  let adminHttps;
  let agent;

  before(async () => {
    dir = makeTempDir('fleetgate-admin-tls-');
    certs = makeTestCerts(dir);
    gw = await startGateway({
      admin: { tls: { cert: certs.certFile, key: certs.keyFile }, token_env: 'FG_IT_ADMIN_TOKEN' },
      registration: { token_env: 'FG_IT_REGISTRATION_TOKEN', allowed_urls: ['http://127.0.0.1:*'], heartbeat_interval: '1s' },
      health: FAST_HEALTH,
      models: [{ name: 'm', endpoints: [] }],
      routing: { queue_timeout: '10s' },
    }, { env: TOKEN_ENV });
    adminHttps = gw.adminUrl.replace('http://', 'https://');
  });
  after(async () => {
    stopAgent(agent);
    await stopChecked(gw);
    removeDir(dir);
  });

  const admin = (p, options = {}) => request(`${adminHttps}${p}`, { ca: certs.ca, headers: { Authorization: `Bearer ${ADMIN_TOKEN}` }, ...options });

  test('an agent registers over HTTPS (trusting the test CA) and serves through the gateway', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    agent = await startAgent([
      '--listen', `127.0.0.1:${port}`, '--model', 'm', '--public-url', url, '--gateway-url', adminHttps,
      '--gateway-token-env', 'FG_IT_REGISTRATION_TOKEN',
    ], { env: { ...TOKEN_ENV, SSL_CERT_FILE: certs.caFile } });
    await eventually(async () => {
      const res = await admin('/admin/v1/replicas');
      return res.status === 200 && res.json.replicas.some((r) => r.url === url && r.state === 'healthy');
    }, { timeoutMs: 10000, what: 'the agent registered and healthy' });
    const res = await request(`${gw.publicUrl}/v1/chat/completions`, { method: 'POST', body: CHAT });
    assert.equal(res.status, 200, res.text);
  });

  test('the admin API and /metrics answer over HTTPS; an untrusting client and plain HTTP get nothing', async () => {
    assert.equal((await admin('/admin/v1/fleet')).status, 200);
    assert.equal((await admin('/metrics', { headers: {} })).status, 200);
    await assert.rejects(request(`${adminHttps}/healthz`), 'a client that does not trust the CA');
    const plain = await request(`${gw.adminUrl}/healthz`, { timeoutMs: 5000 }).catch((e) => e);
    assert.ok(plain instanceof Error, `plain HTTP to the TLS port: ${plain.status}`);
  });
});
