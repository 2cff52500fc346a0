// Pass-through: what a replica sends reaches the client byte for byte, streaming or not, over plain
// HTTP and TLS (replica side verified with a test CA; public side served over TLS), with the
// upstream Authorization replaced by the replica key, and the /v1/models routes.

import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import {
  eventually, makeTempDir, makeTestCerts, openAiError, openStream, postJson, removeDir, request, startGateway, stopChecked,
} from './lib/gateway.mjs';

const REPLICA_KEY = 'replica-secret-7f3a';

describe('pass-through', () => {
  let certs;
  let certDir;
  let plain; // http replica for model m-http
  let secure; // https replica (test CA) for model m-tls
  let gw; // plain public listener, upstream.ca_file = test CA
  let gwTls; // public listener over TLS
  let gwNoCa; // no ca_file: the test CA is not trusted
  let shortKeepAlive; // closes idle keep-alive connections after 100 ms
  let wrongHost; // https, certificate from the test CA but for another host name

  before(async () => {
    certDir = makeTempDir('fleetgate-certs-');
    certs = makeTestCerts(certDir);
    plain = await startFakeReplica({ name: 'plain' });
    secure = await startFakeReplica({ name: 'secure', tls: { key: certs.key, cert: certs.cert } });
    shortKeepAlive = await startFakeReplica({ name: 'short-ka', keepAliveTimeoutMs: 100 });
    wrongHost = await startFakeReplica({ name: 'wrong-host', tls: { key: certs.wrongHostKey, cert: certs.wrongHostCert } });
    const env = { FG_IT_REPLICA_KEY: REPLICA_KEY };
    gw = await startGateway({
      models: [
        { name: 'm-http', endpoints: [plain.url] },
        { name: 'm-tls', slots: 2, endpoints: [secure.url] },
        { name: 'm-prefix', endpoints: [`${plain.url}/phone7`] },
        { name: 'm-short-ka', endpoints: [shortKeepAlive.url] },
        { name: 'm-empty', endpoints: [] },
        // Probed once an hour: its probes fail too (the same TLS refusal), and after three of
        // them (15 s at the default interval: within this file's run on a slow sanitized build)
        // the request would wait in the queue for a healthy replica instead of being refused.
        { name: 'm-wrong-host', health: { interval: '1h' }, endpoints: [wrongHost.url] },
      ],
      upstream: { api_key_env: 'FG_IT_REPLICA_KEY', ca_file: certs.caFile },
    }, { env });
    gwTls = await startGateway({
      server: { tls: { cert: certs.certFile, key: certs.keyFile } },
      models: [{ name: 'm-http', endpoints: [plain.url] }],
      upstream: { api_key_env: 'FG_IT_REPLICA_KEY' },
    }, { env });
    gwNoCa = await startGateway({
      models: [{ name: 'm-tls', endpoints: [secure.url] }],
      routing: { retries: 0 },
      upstream: { connect_timeout: '3s' },
    });
  });

  after(async () => {
    for (const g of [gw, gwTls, gwNoCa]) {
      await stopChecked(g);
    }
    await plain?.close();
    await secure?.close();
    await shortKeepAlive?.close();
    await wrongHost?.close();
    removeDir(certDir);
  });

  // The request body is sent with unusual spacing and a unicode escape: the replica must receive
  // these exact bytes (the gateway forwards the body unchanged).
  const chatBody = (model, extra = '') =>
    `{ "model" : "${model}",\n  "messages": [{"role":"user","content":"caf\\u00e9 \u2014 7000 tokens of context"}]${extra} }`;

  async function nonStreaming(gateway, model, replica, options = {}) {
    const body = chatBody(model, ', "temperature": 0');
    const before = replica.requests.length;
    const res = await postJson(gateway.publicUrl, '/v1/chat/completions', body, {
      headers: { Authorization: 'Bearer client-key-should-not-leak' },
      ...options,
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(replica.requests.length, before + 1, 'exactly one upstream request');
    const seen = replica.requests.at(-1);
    assert.equal(seen.rawBody, body, 'the replica receives the body unchanged');
    assert.equal(seen.method, 'POST');
    assert.equal(seen.path, '/v1/chat/completions');
    assert.equal(res.text, seen.sent, 'the client receives the replica body byte for byte');
    assert.ok(res.body.equals(Buffer.from(seen.sent, 'utf8')));
    assert.equal(res.headers['content-type'], 'application/json; charset=utf-8');
    assert.ok(res.requestId, 'X-Request-Id is set');
    return { res, seen };
  }

  async function streaming(gateway, model, replica, options = {}) {
    const total = 4;
    // The client asks for usage itself, so the gateway has no reason to touch the stream.
    const body = JSON.stringify({ model, stream: true, stream_options: { include_usage: true }, messages: [], fake: { chunks: total, intervalMs: 150 } });
    let sentWhenFirstArrived = null;
    const stream = await openStream(`${gateway.publicUrl}/v1/chat/completions`, {
      body,
      onData: () => {
        if (sentWhenFirstArrived === null) {
          sentWhenFirstArrived = replica.requests.at(-1)?.chunksSent;
        }
      },
      ...options,
    });
    assert.equal(stream.status, 200);
    assert.match(stream.headers['content-type'], /^text\/event-stream/);
    assert.equal(stream.headers['x-accel-buffering'], 'no');
    assert.ok(stream.requestId, 'X-Request-Id is set');
    const text = await stream.done;
    const seen = replica.requests.at(-1);
    assert.equal(seen.rawBody, body);
    assert.equal(text, seen.sent, 'the stream reaches the client byte for byte');
    assert.ok(text.endsWith('data: [DONE]\n\n'));
    // Relayed as it arrives: the first event reached the client before the replica had sent all.
    assert.ok(sentWhenFirstArrived !== null && sentWhenFirstArrived < total,
      `first piece arrived after ${sentWhenFirstArrived} of ${total} events were sent: the stream was buffered`);
    return { stream, seen, text };
  }

  test('non-streaming chat over plain HTTP: byte for byte, replica key replaces the client key', async () => {
    const { res, seen } = await nonStreaming(gw, 'm-http', plain);
    assert.equal(seen.headers.authorization, `Bearer ${REPLICA_KEY}`);
    assert.equal(seen.headers.host, `127.0.0.1:${plain.port}`, 'Host is the replica host');
    const log = await gw.requestLog(res.requestId);
    assert.equal(log.model, 'm-http');
    assert.equal(log.status, 200);
    assert.equal(log.outcome, 'ok');
    assert.equal(log.attempts, 1);
    assert.equal(log.endpoint, '/v1/chat/completions');
    assert.equal(log.prompt_tokens, 7000 + seen.seq, 'usage read from the answer');
    assert.equal(log.completion_tokens, 5);
    for (const k of ['replica', 'queue_wait_ms', 'ttfb_ms', 'duration_ms']) {
      assert.ok(k in log, `request log has ${k}`);
    }
    assert.ok(!JSON.stringify(log).includes('7000 tokens of context'), 'the prompt is never logged');
  });

  test('a client X-Request-Id is echoed', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm-http', messages: [] }, {
      headers: { 'X-Request-Id': 'it-req-0001' },
    });
    assert.equal(res.status, 200);
    assert.equal(res.requestId, 'it-req-0001');
  });

  test('streaming chat over plain HTTP: relayed chunk by chunk, byte for byte', async () => {
    const { seen } = await streaming(gw, 'm-http', plain);
    assert.equal(seen.headers.authorization, `Bearer ${REPLICA_KEY}`);
  });

  test('a stream whose client did not ask for usage: the client gets exactly the plain stream', async () => {
    // The gateway may ask the replica for usage on the client's behalf (token counts for logs and
    // metrics); if it does, it must strip it again: the client sees what the replica sends to a
    // request without stream_options.
    const sent = { model: 'm-http', stream: true, messages: [{ role: 'user', content: 'x' }], fake: { chunks: 3, intervalMs: 20 } };
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, { body: sent });
    assert.equal(stream.status, 200);
    const text = await stream.done;
    const seen = plain.requests.at(-1);
    const { stream_options: options, ...rest } = seen.json;
    assert.deepEqual(rest, sent, 'the replica receives the client body (at most stream_options added)');
    if (options !== undefined) {
      assert.deepEqual(options, { include_usage: true });
    }
    assert.equal(text, seen.sentPlain, 'no usage chunk, no "usage":null members');
    assert.ok(!text.includes('"usage"'));
    const log = await gw.requestLog(stream.requestId);
    if (options !== undefined) {
      assert.equal(log.completion_tokens, 3, 'the usage the gateway asked for is logged');
    }
  });

  test('completions and embeddings are proxied to the same path, byte for byte', async () => {
    for (const [path, body] of [
      ['/v1/completions', { model: 'm-http', prompt: 'Transaction 4411: RISK_LEVEL?', max_tokens: 8 }],
      ['/v1/embeddings', { model: 'm-http', input: ['a', 'b'] }],
    ]) {
      const res = await postJson(gw.publicUrl, path, body);
      assert.equal(res.status, 200, res.text);
      const seen = plain.requests.at(-1);
      assert.equal(seen.path, path);
      assert.deepEqual(seen.json, body);
      assert.equal(res.text, seen.sent);
    }
    const stream = await openStream(`${gw.publicUrl}/v1/completions`, { body: { model: 'm-http', prompt: 'x', stream: true } });
    assert.equal(stream.status, 200);
    const text = await stream.done;
    assert.equal(plain.requests.at(-1).path, '/v1/completions');
    assert.equal(text, plain.requests.at(-1).sentPlain);
  });

  test('a replica error status is forwarded unchanged (not retried, same status, type and body)', async () => {
    const errorBody = '{"error": {"message": "context length exceeded", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}';
    const before = plain.requests.length;
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', {
      model: 'm-http', messages: [], fake: { type: 'status', status: 400, body: errorBody, contentType: 'application/json' },
    });
    assert.equal(res.status, 400);
    assert.equal(res.text, errorBody);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(plain.requests.length, before + 1, 'a 4xx is the answer, not a reason to retry');
  });

  test('a streaming request refused by the replica (400) gets that error as a plain response', async () => {
    const errorBody = '{"error":{"message":"prompt too long","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}';
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', {
      model: 'm-http', stream: true, messages: [], fake: { type: 'status', status: 400, body: errorBody },
    });
    assert.equal(res.status, 400);
    assert.equal(res.text, errorBody);
  });

  test('large bodies pass through intact both ways', async () => {
    const prompt = 'x'.repeat(200 * 1024) + '\u00e9';
    const big = JSON.stringify({ model: 'm-http', messages: [{ role: 'user', content: prompt }], fake: { body: JSON.stringify({ blob: 'y'.repeat(1024 * 1024) }) } });
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', big);
    assert.equal(res.status, 200);
    const seen = plain.requests.at(-1);
    assert.equal(seen.rawBody, big);
    assert.equal(res.body.length, Buffer.byteLength(seen.sent));
    assert.equal(res.text, seen.sent);
  });

  test('bodies over 64 KiB (inspected off the io thread): usage spliced in, refusals the same', async () => {
    // Such bodies are inspected on the gateway's work pool (docs/architecture.md): what it finds
    // must be what the io thread would find.
    const content = 'z'.repeat(300 * 1024) + '\u00e9';
    const sent = { model: 'm-http', stream: true, messages: [{ role: 'user', content }], fake: { chunks: 3, intervalMs: 20 } };
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, { body: sent });
    assert.equal(stream.status, 200);
    const text = await stream.done;
    const seen = plain.requests.at(-1);
    const { stream_options: options, ...rest } = seen.json;
    assert.deepEqual(rest, sent, 'the replica receives the client body');
    assert.deepEqual(options, { include_usage: true }, 'usage asked for on the client\'s behalf');
    assert.equal(text, seen.sentPlain, 'and stripped again');
    const log = await gw.requestLog(stream.requestId);
    assert.equal(log.completion_tokens, 3);

    const before = plain.requests.length;
    const unknown = await postJson(gw.publicUrl, '/v1/chat/completions', { ...sent, model: 'no-such-model' });
    assert.equal(unknown.status, 404);
    assert.equal(openAiError(unknown).code, 'model_not_found');
    const broken = await postJson(gw.publicUrl, '/v1/chat/completions', JSON.stringify(sent).slice(0, -1));
    assert.equal(broken.status, 400);
    assert.equal(openAiError(broken).code, 'invalid_json');
    assert.equal(plain.requests.length, before, 'refused bodies never reach a replica');
  });

  test('several requests on one keep-alive client connection', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 3; ++i) {
        const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm-http', messages: [], i }, { agent });
        assert.equal(res.status, 200);
        assert.equal(res.text, plain.requests.at(-1).sent);
      }
    } finally {
      agent.destroy();
    }
  });

  test('a non-streaming answer in chunked encoding is forwarded whole, byte for byte', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm-http', messages: [], fake: { chunked: true, intervalMs: 50 } });
    assert.equal(res.status, 200);
    const seen = plain.requests.at(-1);
    assert.equal(res.text, seen.sent);
    assert.ok(JSON.parse(res.text).choices);
  });

  test('a fast stream of many small events arrives intact', async () => {
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
      body: { model: 'm-http', stream: true, messages: [], fake: { chunks: 500, intervalMs: 0 } },
    });
    const text = await stream.done;
    const seen = plain.requests.at(-1);
    assert.equal(seen.chunksSent, 500);
    assert.equal(text, seen.sentPlain);
  });

  test('a request body sent with chunked transfer encoding reaches the replica whole', async () => {
    const body = JSON.stringify({ model: 'm-http', messages: [{ role: 'user', content: 'z'.repeat(10000) }] });
    const res = await new Promise((resolve, reject) => {
      const req = http.request(`${gw.publicUrl}/v1/chat/completions`, {
        method: 'POST', agent: false, headers: { 'Content-Type': 'application/json' },
      }, (r) => {
        let text = '';
        r.setEncoding('utf8');
        r.on('data', (d) => {
          text += d;
        });
        r.on('end', () => resolve({ status: r.statusCode, text }));
      });
      req.on('error', reject);
      // No Content-Length: Node sends Transfer-Encoding: chunked, one chunk per write.
      req.write(body.slice(0, 5000));
      setTimeout(() => req.end(body.slice(5000)), 50);
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(plain.requests.at(-1).rawBody, body);
    assert.equal(res.text, plain.requests.at(-1).sent);
  });

  test('Expect: 100-continue is honoured (curl sends it for bodies over 1 KiB)', async () => {
    const body = JSON.stringify({ model: 'm-http', messages: [{ role: 'user', content: 'q'.repeat(4000) }] });
    const res = await new Promise((resolve, reject) => {
      const req = http.request(`${gw.publicUrl}/v1/chat/completions`, {
        method: 'POST',
        agent: false,
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), Expect: '100-continue' },
      }, (r) => {
        let text = '';
        r.on('data', (d) => {
          text += d;
        });
        r.on('end', () => resolve({ status: r.statusCode, text }));
      });
      const timer = setTimeout(() => req.destroy(new Error('no 100 Continue within 2 s')), 2000);
      req.on('continue', () => {
        clearTimeout(timer);
        req.end(body);
      });
      req.on('error', reject);
    });
    assert.equal(res.status, 200);
    assert.equal(plain.requests.at(-1).rawBody, body);
  });

  test('an endpoint URL with a path prefix keeps it', async () => {
    const res = await postJson(gw.publicUrl, '/v1/embeddings', { model: 'm-prefix', input: 'x' });
    assert.equal(res.status, 200, res.text);
    assert.equal(plain.requests.at(-1).path, '/phone7/v1/embeddings');
    assert.equal(res.text, plain.requests.at(-1).sent);
  });

  test('replica closing idle keep-alive connections: pooled connections going stale cost no failure', async () => {
    for (let i = 0; i < 4; ++i) {
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm-short-ka', messages: [], i });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.text, shortKeepAlive.requests.at(-1).sent);
      const log = await gw.requestLog(res.requestId);
      assert.equal(log.attempts, 1, 'a stale pooled connection is not a failed attempt');
      // The replica closes the idle connection after its 100 ms keep-alive timeout: wait for that
      // (an event), so the next request finds a stale pooled connection.
      const socket = shortKeepAlive.recordSockets.get(shortKeepAlive.requests.at(-1));
      await eventually(() => socket.destroyed, { what: 'the replica to close the idle connection' });
    }
    assert.equal(shortKeepAlive.requests.length, 4);
  });

  test('TLS replica verified with upstream.ca_file: non-streaming and streaming', async () => {
    const { seen } = await nonStreaming(gw, 'm-tls', secure);
    assert.equal(seen.headers.authorization, `Bearer ${REPLICA_KEY}`);
    assert.equal(seen.headers.host, `127.0.0.1:${secure.port}`);
    await streaming(gw, 'm-tls', secure);
  });

  test('TLS replica whose CA is not trusted is never used (certificates are verified)', async () => {
    const before = secure.requests.length;
    const res = await postJson(gwNoCa.publicUrl, '/v1/chat/completions', { model: 'm-tls', messages: [] });
    assert.equal(res.status, 502, res.text);
    const error = openAiError(res);
    assert.equal(error.type, 'server_error');
    assert.equal(secure.requests.length, before, 'no request reached the replica');
    // The gateway aborted the handshake itself (unknown CA alert), rather than failing elsewhere.
    await eventually(() => secure.tlsErrors.length > 0, { what: 'the replica to see a failed TLS handshake' });
  });

  test('TLS replica with a certificate for another host name is refused (hostname verified)', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm-wrong-host', messages: [] });
    assert.equal(res.status, 502, res.text);
    openAiError(res);
    assert.equal(wrongHost.requests.length, 0, 'no request reached the replica');
  });

  test('public listener over TLS: non-streaming and streaming', async () => {
    await nonStreaming(gwTls, 'm-http', plain, { ca: certs.ca });
    await streaming(gwTls, 'm-http', plain, { ca: certs.ca });
    const models = await request(`${gwTls.publicUrl}/v1/models`, { ca: certs.ca });
    assert.equal(models.status, 200);
    await assert.rejects(request(`${gwTls.publicUrl}/v1/models`, { ca: certs.otherCa }), /certificate|self.signed|verify/i);
  });

  test('GET /v1/models lists the configured models', async () => {
    const res = await request(`${gw.publicUrl}/v1/models`);
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'], /^application\/json/);
    assert.ok(res.requestId);
    assert.equal(res.json.object, 'list');
    assert.deepEqual(res.json.data.map((m) => m.id).sort(), ['m-empty', 'm-http', 'm-prefix', 'm-short-ka', 'm-tls', 'm-wrong-host']);
    for (const m of res.json.data) {
      assert.equal(m.object, 'model');
      assert.equal(typeof m.owned_by, 'string');
      assert.equal(typeof m.created, 'number');
    }
    assert.deepEqual((await request(`${gwTls.publicUrl}/v1/models`, { ca: certs.ca })).json.data.map((m) => m.id), ['m-http']);
  });

  test('GET /v1/models/{id}', async () => {
    const res = await request(`${gw.publicUrl}/v1/models/m-tls`);
    assert.equal(res.status, 200);
    assert.equal(res.json.id, 'm-tls');
    assert.equal(res.json.object, 'model');
    const missing = await request(`${gw.publicUrl}/v1/models/nope`);
    assert.equal(missing.status, 404);
    assert.equal(openAiError(missing).code, 'model_not_found');
    assert.ok(missing.requestId);
  });

  test('admin listener: healthz, readyz, metrics; not on the public listener', async () => {
    assert.equal((await request(`${gw.adminUrl}/healthz`)).status, 200);
    const ready = await request(`${gw.adminUrl}/readyz`);
    assert.equal(ready.status, 200, ready.text);
    const metrics = await request(`${gw.adminUrl}/metrics`);
    assert.equal(metrics.status, 200);
    assert.match(metrics.text, /^# (HELP|TYPE) fleetgate_/m);
    assert.equal((await request(`${gw.publicUrl}/metrics`)).status, 404);
  });
});

describe('readiness without replicas', () => {
  test('/readyz is 503 when no model has a replica, /healthz still 200', async (t) => {
    const gw = await startGateway({ models: [{ name: 'nothing-yet', endpoints: [] }] });
    t.after(() => stopChecked(gw));
    assert.equal((await request(`${gw.adminUrl}/healthz`)).status, 200);
    assert.equal((await request(`${gw.adminUrl}/readyz`)).status, 503);
  });
});
