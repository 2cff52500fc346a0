// Bad input: every malformed or unauthorised request gets a clear OpenAI-style error with a
// fitting status, never reaches a replica, and never crashes or stalls the gateway; malformed HTTP
// on a raw socket gets 400; configuration errors are reported by --check naming the key.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import {
  makeTempDir, openAiError, postJson, removeDir, request, runFleetgate, startGateway, stopChecked, toYaml,
} from './lib/gateway.mjs';

const KEYS = ['sk-fleet-alpha', 'sk-fleet-beta'];
const AUTH = { Authorization: `Bearer ${KEYS[0]}` };

// Writes raw bytes on a fresh connection; resolves with everything the gateway sent back before
// closing (or after `waitMs` of silence). With `detail`, resolves with {received, closedByPeer}
// (false when our silence timer ended it).
function rawExchange(url, bytes, { waitMs = 3000, detail = false } = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port) });
    let received = '';
    let timer = null;
    let done = false;
    const finish = (closedByPeer) => {
      if (done) {
        return;
      }
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(detail ? { received, closedByPeer } : received);
    };
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => finish(false), waitMs);
    };
    socket.on('connect', () => {
      socket.write(bytes);
      arm();
    });
    socket.on('data', (d) => {
      received += d.toString('latin1');
      arm();
    });
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('error', (e) => (received ? finish() : reject(e)));
  });
}

describe('bad requests', () => {
  let replica;
  let gw;

  before(async () => {
    replica = await startFakeReplica({ name: 'errors' });
    gw = await startGateway({
      server: { api_keys_env: 'FG_IT_CLIENT_KEYS', max_body_bytes: 2048, header_timeout: '1s', body_timeout: '2s' },
      models: [{ name: 'm', endpoints: [replica.url] }],
    }, { env: { FG_IT_CLIENT_KEYS: ` ${KEYS[0]} ,${KEYS[1]}` } });
  });
  after(async () => {
    await stopChecked(gw);
    await replica?.close();
  });

  // Sends a request and checks the status, the OpenAI error shape, X-Request-Id and that no
  // replica was involved; returns the error object.
  async function expectError(status, { path: p = '/v1/chat/completions', method = 'POST', headers = AUTH, body }) {
    const before = replica.requests.length;
    const res = await request(`${gw.publicUrl}${p}`, { method, headers, body });
    assert.equal(res.status, status, `${method} ${p}: ${res.text}`);
    assert.match(res.headers['content-type'] ?? '', /^application\/json/);
    assert.ok(res.requestId, 'X-Request-Id on error responses too');
    const error = openAiError(res);
    assert.ok(error.message.length > 0);
    assert.equal(replica.requests.length, before, 'a bad request never reaches a replica');
    return { error, res };
  }

  test('malformed JSON: 400 invalid_json', async () => {
    for (const body of ['{"model": "m",', 'not json', '{"model": "m"} trailing', '']) {
      const { error } = await expectError(400, { body, headers: { ...AUTH, 'Content-Type': 'application/json' } });
      assert.equal(error.code, 'invalid_json', `body ${JSON.stringify(body)}`);
      assert.equal(error.type, 'invalid_request_error');
    }
  });

  test('missing model: 400 missing_model', async () => {
    const { error } = await expectError(400, { body: { messages: [] } });
    assert.equal(error.code, 'missing_model');
    assert.match(error.message, /model/);
  });

  test('unknown model: 404 model_not_found', async () => {
    const { error } = await expectError(404, { body: { model: 'gpt-nope', messages: [] } });
    assert.equal(error.code, 'model_not_found');
    assert.match(error.message, /gpt-nope/);
  });

  test('body over server.max_body_bytes: 413', async () => {
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(4096) }] });
    await expectError(413, { body });
    // The limit is exact: a body just under it still passes.
    const fits = JSON.stringify({ model: 'm', pad: 'y'.repeat(1900) });
    assert.ok(Buffer.byteLength(fits) <= 2048);
    const ok = await postJson(gw.publicUrl, '/v1/chat/completions', fits, { headers: AUTH });
    assert.equal(ok.status, 200);
  });

  test('content type that is not JSON: 415', async () => {
    const body = JSON.stringify({ model: 'm', messages: [] });
    await expectError(415, { body, headers: { ...AUTH, 'Content-Type': 'text/plain' } });
    await expectError(415, { body, headers: { ...AUTH, 'Content-Type': 'application/x-www-form-urlencoded' } });
    const withCharset = await postJson(gw.publicUrl, '/v1/chat/completions', body, {
      headers: { ...AUTH, 'Content-Type': 'application/json; charset=utf-8' },
    });
    assert.equal(withCharset.status, 200, 'parameters after application/json are fine');
  });

  test('unknown path: 404 in OpenAI format', async () => {
    await expectError(404, { path: '/v1/nothing-here', body: { model: 'm' } });
    await expectError(404, { path: '/v2/chat/completions', body: { model: 'm' } });
    await expectError(404, { path: '/', method: 'GET', body: undefined });
  });

  test('wrong method: 405', async () => {
    await expectError(405, { path: '/v1/chat/completions', method: 'GET', body: undefined });
    await expectError(405, { path: '/v1/embeddings', method: 'PUT', body: { model: 'm' } });
    await expectError(405, { path: '/v1/models', method: 'POST', body: {} });
  });

  test('missing or invalid API key: 401; every configured key works', async () => {
    const body = { model: 'm', messages: [] };
    for (const headers of [{}, { Authorization: 'Bearer wrong' }, { Authorization: KEYS[0] }, { Authorization: `Basic ${KEYS[0]}` }, { Authorization: `Bearer ${KEYS[0]}x` }]) {
      const { error, res } = await expectError(401, { body, headers });
      assert.equal(error.type, 'authentication_error');
      assert.ok(!res.text.includes(KEYS[0]), 'the key is not echoed');
    }
    await expectError(401, { path: '/v1/models', method: 'GET', headers: {}, body: undefined });
    for (const key of KEYS) {
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', body, { headers: { Authorization: `Bearer ${key}` } });
      assert.equal(res.status, 200, `key ${key}`);
      assert.equal(replica.requests.at(-1).headers.authorization, undefined, 'the client key is not forwarded to the replica');
    }
  });

  test('malformed HTTP gets 400 and the gateway keeps serving', async () => {
    const garbage = [
      'HELLO WORLD\r\n\r\n',
      'GET / HTTP/9.9\r\n\r\n',
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n',
      // A bad body is judged after the key (checked from the head): this client has one.
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS[0]}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nboom\r\n`,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello',
      '\x00\x01\x02\x03\xff\xfe\r\n\r\n',
      'GET /v1/models HTTP/1.1\r\nBad Header Without Colon\r\n\r\n',
    ];
    for (const g of garbage) {
      const reply = await rawExchange(gw.publicUrl, Buffer.from(g, 'latin1'));
      assert.match(reply, /^HTTP\/1\.1 400 /, `garbage ${JSON.stringify(g)} got ${JSON.stringify(reply.slice(0, 80))}`);
    }
    // Oversized headers: 431 (or 400), never a crash.
    const huge = `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`;
    const reply = await rawExchange(gw.publicUrl, huge);
    assert.match(reply, /^HTTP\/1\.1 (400|431) /, JSON.stringify(reply.slice(0, 80)));
    // A request cut short (headers promise a body that never comes) is dropped after body_timeout.
    // The gateway closes the connection (our own silence timer, far longer, would otherwise).
    const stalled = await rawExchange(gw.publicUrl, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"model"',
      { waitMs: 30000, detail: true });
    assert.ok(stalled.closedByPeer, 'a stalled client is cut off by body_timeout');
    // Half a request line, then the client goes away.
    const s = net.connect(Number(new URL(gw.publicUrl).port), '127.0.0.1');
    await new Promise((r) => s.on('connect', r));
    let halfReply = '';
    s.on('data', (d) => {
      halfReply += d.toString('latin1');
    });
    s.end('POST /v1/chat/compl');
    await new Promise((r) => s.on('close', r));
    assert.ok(halfReply === '' || /^HTTP\/1\.1 400 /.test(halfReply), JSON.stringify(halfReply.slice(0, 80)));

    assert.ok(gw.running, 'the gateway is still running');
    const ok = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm', messages: [] }, { headers: AUTH });
    assert.equal(ok.status, 200);
    assert.equal((await request(`${gw.adminUrl}/healthz`)).status, 200);
  });

  test('a valid request still works after all of the above', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm', messages: [] }, { headers: AUTH });
    assert.equal(res.status, 200);
    assert.equal(res.text, replica.requests.at(-1).sent);
    const bad = gw.requestLogs().filter((l) => l.status >= 400);
    assert.ok(bad.length > 0, 'bad requests are logged too');
  });
});

describe('configuration check', () => {
  let dir;

  before(() => {
    dir = makeTempDir('fleetgate-check-');
  });
  after(() => removeDir(dir));

  const write = (name, text) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };

  test('--check accepts a valid file (exit 0)', () => {
    const file = write('good.yaml', toYaml({
      server: { listen: '127.0.0.1:0' },
      admin: { listen: '127.0.0.1:0' },
      models: [{ name: 'm', slots: 2, endpoints: ['http://127.0.0.1:7001', { url: 'https://a1b2c3.acu.run', slots: 4 }] }],
      routing: { queue_max: 10, queue_timeout: '30s', retries: 1, keepalive_interval: '15s' },
      upstream: { connect_timeout: '1s', first_byte_timeout: '10m', idle_timeout: '2m' },
    }));
    const r = runFleetgate(['--config', file, '--check']);
    assert.equal(r.status, 0, r.stderr);
  });

  const cases = [
    ['unknown key', 'models:\n  - name: m\n    endpoints: [http://127.0.0.1:7001]\nroutnig:\n  retries: 1\n', /routnig/],
    ['unknown nested key', 'models:\n  - name: m\n    endpoint: [http://127.0.0.1:7001]\n', /models\[0\]\.endpoint\b/],
    ['duration without unit', 'models:\n  - name: m\n    endpoints: [http://127.0.0.1:7001]\nrouting:\n  queue_timeout: 600\n', /routing\.queue_timeout/],
    ['zero slots', 'models:\n  - name: m\n    slots: 0\n    endpoints: [http://127.0.0.1:7001]\n', /models\[0\]\.slots/],
    ['bad URL scheme', 'models:\n  - name: m\n    endpoints: [ftp://x]\n', /models\[0\]\.endpoints\[0\]/],
    ['no models', 'server:\n  listen: 127.0.0.1:0\n', /models/],
    ['YAML syntax', 'models: [\n', /syntax/],
  ];
  for (const [what, text, pattern] of cases) {
    test(`--check refuses ${what} (exit 1, names the key)`, () => {
      const file = write(`bad-${what.replace(/\W+/g, '-')}.yaml`, text);
      const r = runFleetgate(['--config', file, '--check']);
      assert.equal(r.status, 1, `stdout ${r.stdout} stderr ${r.stderr}`);
      assert.match(r.stderr, pattern);
      assert.ok(r.stderr.includes(path.basename(file)), 'the message names the file');
    });
  }

  test('the gateway refuses to start with a bad file (exit 1)', () => {
    const file = write('bad-start.yaml', 'models:\n  - name: m\n    endpoints: [http://127.0.0.1:7001]\nrouting:\n  retries: abc\n');
    const r = runFleetgate(['--config', file]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /routing\.retries/);
  });
});
