// Hostile and broken phones (issue 11, the upstream side): interim 1xx answers before the final one,
// bytes left on a pooled connection after an answer, an endless SSE line, an oversized whole answer,
// a phone serving another model (404 model_not_found), a pooled connection that turns out dead
// (one free retry) versus a phone resetting after it read the request (no free retry),
// routing.request_timeout for a queued request and for a slow stream, and keep-alive comments
// never following the end of a stream. Every test waits for events, never for a duration.

import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { replicaByUrl } from './lib/lifecycle_util.mjs';
import {
  makeTempDir,
  makeTestCerts,
  openAiError,
  openStream,
  parseSse,
  postJson,
  removeDir,
  startGateway,
  stopChecked,
} from './lib/gateway.mjs';

// A test that fails must not hang the suite (a regression can stall a stream forever).
const TEST_TIMEOUT_MS = 30000;

const chat = (model, extra = {}) => ({ model, messages: [{ role: 'user', content: 'is this a scam?' }], ...extra });

function errorEvents(text) {
  return parseSse(text)
    .filter((e) => e.data && e.data !== '[DONE]')
    .map((e) => JSON.parse(e.data))
    .filter((d) => d.error);
}

function withoutComments(text) {
  return parseSse(text)
    .filter((e) => e.data !== undefined)
    .map((e) => `data: ${e.data}\n\n`)
    .join('');
}

async function streamText(gw, body, options = {}) {
  const s = await openStream(`${gw.publicUrl}/v1/chat/completions`, { body, ...options });
  return { status: s.status, headers: s.headers, requestId: s.requestId, text: await s.done };
}

async function closeAll(gw, fakes) {
  await stopChecked(gw);
  for (const f of Object.values(fakes)) {
    await f.close();
  }
}

describe('interim (1xx) answers from a phone', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.interim = await startFakeReplica({ name: 'interim', mode: { type: 'interim', interim: [100, 102, 103] } });
    gw = await startGateway({ models: [{ name: 'interim', endpoints: [fakes.interim.url] }], routing: { retries: 0 } });
  });
  after(() => closeAll(gw, fakes));

  test('a whole answer: 100, 102 and 103 are skipped and the final 200 is relayed', { timeout: TEST_TIMEOUT_MS }, async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('interim', { tag: 'interim-json' }), { timeoutMs: 10000 });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, fakes.interim.requestsWith('interim-json')[0].sentPlain);
  });

  test('a stream: the interim answers are skipped and the event stream is relayed', { timeout: TEST_TIMEOUT_MS }, async () => {
    const { status, text } = await streamText(gw, chat('interim', { tag: 'interim-sse', stream: true }), { timeoutMs: 10000 });
    assert.equal(status, 200);
    assert.equal(withoutComments(text), fakes.interim.requestsWith('interim-sse')[0].sentPlain);
  });
});

describe('a pooled connection is never reused with unread bytes on it', () => {
  const fakes = {};
  let gw;
  let certs;

  before(async () => {
    certs = makeTestCerts(makeTempDir('fleetgate-hu-'));
    fakes.trailing = await startFakeReplica({ name: 'trailing' });
    fakes.closer = await startFakeReplica({ name: 'closer', keepAliveTimeoutMs: 50 });
    fakes.tls = await startFakeReplica({ name: 'tls', tls: { key: certs.key, cert: certs.cert } });
    gw = await startGateway({
      models: [
        { name: 'trailing', slots: 1, endpoints: [fakes.trailing.url] },
        { name: 'closer', slots: 1, endpoints: [fakes.closer.url] },
        { name: 'tls', slots: 1, endpoints: [fakes.tls.url] },
      ],
      routing: { retries: 0 },
      upstream: { ca_file: certs.caFile },
      log: { level: 'debug' },
    });
  });
  after(async () => {
    await closeAll(gw, fakes);
    removeDir(certs?.dir);
  });

  test('clean keep-alive connections are reused, over TCP and TLS', async () => {
    for (const model of ['trailing', 'tls']) {
      for (let i = 0; i < 3; ++i) {
        const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat(model, { tag: `reuse-${model}-${i}` }));
        assert.equal(res.status, 200, res.text);
      }
      assert.deepEqual(fakes[model].requestsWith(`reuse-${model}-`).map((r) => r.onConnection), [1, 2, 3], `${model}: one connection`);
    }
  });

  test('a connection the phone closed while idle is not used again', async () => {
    const first = await postJson(gw.publicUrl, '/v1/chat/completions', chat('closer', { tag: 'before-close' }));
    assert.equal(first.status, 200);
    const record = fakes.closer.requestsWith('before-close')[0];
    await fakes.closer.waitFor((f) => f.connectionClosed(record), { what: 'the phone to close the idle connection' });
    const seen = gw.logs.length;
    const second = await postJson(gw.publicUrl, '/v1/chat/completions', chat('closer', { tag: 'after-close' }));
    assert.equal(second.status, 200, second.text);
    assert.equal(fakes.closer.requestsWith('after-close')[0].onConnection, 1);
    const stale = gw.logs.slice(seen).filter((l) => /stale pooled connection/.test(l.msg ?? ''));
    assert.deepEqual(stale, [], 'the closed connection was noticed before a request was written to it');
  });

  test('an answer followed by a second, unasked-for answer: the next request gets its own', { timeout: TEST_TIMEOUT_MS }, async () => {
    const first = await postJson(gw.publicUrl, '/v1/chat/completions', chat('trailing', { tag: 'smuggler', fake: { type: 'trailing' } }));
    assert.equal(first.status, 200, first.text);
    const record = fakes.trailing.requestsWith('smuggler')[0];
    await fakes.trailing.waitFor(() => record.trailingSent, { what: 'the trailing bytes to be written' });
    const second = await postJson(gw.publicUrl, '/v1/chat/completions', chat('trailing', { tag: 'victim' }));
    assert.equal(second.status, 200, second.text);
    assert.ok(!second.text.includes('smuggled'), `the smuggled answer reached a client: ${second.text}`);
    const served = fakes.trailing.requestsWith('victim');
    assert.equal(served.length, 1, 'the phone received the second request');
    assert.equal(second.text, served[0].sentPlain);
    assert.equal(served[0].onConnection, 1, 'on a new connection');
  });
});

describe('an endless SSE line and an oversized whole answer', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.endless = await startFakeReplica({ name: 'endless', mode: { type: 'endlessLine' } });
    fakes.other = await startFakeReplica({ name: 'other' });
    fakes.big = await startFakeReplica({
      name: 'big',
      mode: { type: 'json', body: JSON.stringify({ id: 'big', object: 'chat.completion', choices: [], pad: 'x'.repeat(200 * 1024) }) },
    });
    gw = await startGateway({
      models: [
        { name: 'endless', endpoints: [fakes.endless.url] },
        { name: 'other', endpoints: [fakes.other.url] },
        { name: 'big', endpoints: [fakes.big.url] },
      ],
      routing: { retries: 2 },
      upstream: { max_event_bytes: 65536, max_response_bytes: 131072 },
    });
  });
  after(() => closeAll(gw, fakes));

  for (const includeUsage of [false, true]) {
    test(`one endless line ends that stream with an error event; other requests are served (include_usage ${includeUsage})`, { timeout: TEST_TIMEOUT_MS }, async () => {
      const tag = `endless-${includeUsage}`;
      const body = chat('endless', { tag, stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) });
      const stream = openStream(`${gw.publicUrl}/v1/chat/completions`, { body, timeoutMs: 20000 });
      await fakes.endless.waitFor((f) => f.requestsWith(tag).length === 1, { what: 'the endless stream at the phone' });
      for (let i = 0; i < 3; ++i) {
        const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('other', { tag: `${tag}-other-${i}` }));
        assert.equal(res.status, 200, res.text);
      }
      const s = await stream;
      assert.equal(s.status, 200);
      const text = await s.done;
      assert.ok(!text.includes('xxxx'), 'nothing of the oversized event is relayed');
      const errors = errorEvents(text);
      assert.equal(errors.length, 1, text.slice(0, 500));
      assert.match(errors[0].error.message, /max_event_bytes/);
      assert.ok(text.endsWith('data: [DONE]\n\n'));
      // Nothing of the oversized event reached the client, so it may be retried: here on the same
      // phone (the only one), at most routing.retries times.
      const tries = fakes.endless.requestsWith(tag);
      assert.ok(tries.length >= 1 && tries.length <= 3, `tried ${tries.length} times`);
      await fakes.endless.waitFor(() => tries.every((r) => r.closedEarly), { what: 'the endless upstream connections to close' });
    });
  }

  test('the oversized event counted as a protocol failure of the phone', { timeout: TEST_TIMEOUT_MS }, async () => {
    const errors = await gw.metric('fleetgate_upstream_errors_total', { model: 'endless', kind: 'protocol' });
    assert.ok(errors >= 2, `protocol errors: ${errors}`);
    const endless = await replicaByUrl(gw, fakes.endless.url);
    assert.ok(endless, 'the endless phone is listed');
    assert.ok(endless.failures >= 2, JSON.stringify(endless));
  });

  test('a whole answer above upstream.max_response_bytes: 502, not retried, not relayed', { timeout: TEST_TIMEOUT_MS }, async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('big', { tag: 'too-big' }));
    assert.equal(res.status, 502, res.text.slice(0, 300));
    assert.match(openAiError(res).message, /max_response_bytes/);
    assert.equal(fakes.big.requestsWith('too-big').length, 1, 'the same answer would come again: no retry');
  });
});

describe('a phone serving another model (404 model_not_found)', () => {
  const fakes = {};
  let gw;
  const wrongModel = {
    type: 'status',
    status: 404,
    body: JSON.stringify({ error: { message: "the model 'm' does not exist on this replica", type: 'invalid_request_error', param: 'model', code: 'model_not_found' } }),
  };

  before(async () => {
    fakes.wrong = await startFakeReplica({ name: 'wrong', mode: wrongModel });
    fakes.good = await startFakeReplica({ name: 'good' });
    fakes.loneWrong = await startFakeReplica({ name: 'loneWrong', mode: wrongModel });
    fakes.noRoute = await startFakeReplica({
      name: 'noRoute',
      mode: { type: 'status', status: 404, body: JSON.stringify({ error: { message: 'no such route', type: 'invalid_request_error', param: null, code: null } }) },
    });
    gw = await startGateway({
      models: [
        { name: 'mixed', endpoints: [fakes.wrong.url, fakes.good.url] },
        { name: 'lone-wrong', endpoints: [fakes.loneWrong.url] },
        { name: 'no-route', endpoints: [fakes.noRoute.url] },
      ],
      routing: { retries: 2 },
    });
  });
  after(() => closeAll(gw, fakes));

  test('is a failure: the request goes to another replica', { timeout: TEST_TIMEOUT_MS }, async () => {
    let retried = 0;
    for (let i = 0; i < 4; ++i) {
      const tag = `mixed-${i}`;
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('mixed', { tag }));
      assert.equal(res.status, 200, res.text);
      assert.equal(res.text, fakes.good.requestsWith(tag)[0].sentPlain);
      if ((await gw.requestLog(res.requestId)).attempts >= 2) {
        ++retried;
      }
    }
    assert.ok(retried >= 1 && fakes.wrong.requests.length >= 1, 'the wrong phone was tried first at least once');
    const errors = await gw.metric('fleetgate_upstream_errors_total', { model: 'mixed', kind: 'model_not_found' });
    assert.ok(errors >= 1, `model_not_found errors: ${errors}`);
  });

  test('with no other replica: a 502 of the gateway, not the phone\'s 404', { timeout: TEST_TIMEOUT_MS }, async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('lone-wrong'));
    assert.equal(res.status, 502, res.text);
    assert.equal(openAiError(res).type, 'server_error');
  });

  test('any other 404 of a phone is its answer, relayed as it is', { timeout: TEST_TIMEOUT_MS }, async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('no-route', { tag: 'no-route' }));
    assert.equal(res.status, 404);
    assert.equal(res.text, fakes.noRoute.requestsWith('no-route')[0].sentPlain);
  });
});

describe('a pooled connection that fails', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.phone = await startFakeReplica({ name: 'phone' });
    gw = await startGateway({ models: [{ name: 'pooled', slots: 1, endpoints: [fakes.phone.url] }], routing: { retries: 0 } });
  });
  after(() => closeAll(gw, fakes));

  test('at once (a stale keep-alive connection): one free retry on a new connection', { timeout: TEST_TIMEOUT_MS }, async () => {
    const warm = await postJson(gw.publicUrl, '/v1/chat/completions', chat('pooled', { tag: 'warm' }));
    assert.equal(warm.status, 200);
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('pooled', { tag: 'stale', fake: { type: 'reset', onlyReused: true } }));
    assert.equal(res.status, 200, res.text);
    const seen = fakes.phone.requestsWith('stale');
    assert.equal(seen.length, 2, 'the reused connection, then a new one');
    assert.ok(seen[0].reset && seen[0].onConnection >= 2);
    assert.equal(seen[1].onConnection, 1);
    assert.equal(res.text, seen[1].sentPlain);
  });

  test('after the phone held the request a while: no free retry on the same phone', { timeout: TEST_TIMEOUT_MS }, async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('pooled', { tag: 'late-reset', fake: { type: 'reset', onlyReused: true, afterMs: 1500 } }));
    const seen = fakes.phone.requestsWith('late-reset');
    assert.equal(seen.length, 1, 'sent once: the phone may have started the work');
    assert.ok(seen[0].onConnection >= 2, 'it came on a pooled connection');
    assert.equal(res.status, 502, res.text);
    openAiError(res);
  });
});

describe('routing.request_timeout', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.parked = await startFakeReplica({ name: 'parked' });
    fakes.slow = await startFakeReplica({ name: 'slow', mode: { type: 'stream', chunks: 400, intervalMs: 25 } });
    fakes.hang = await startFakeReplica({ name: 'hangT', mode: { type: 'hang' } });
    gw = await startGateway({
      models: [
        { name: 'parked', endpoints: [fakes.parked.url], health: { interval: '100ms', timeout: '80ms', unhealthy_after: 1 } },
        { name: 'slow', endpoints: [fakes.slow.url] },
        { name: 'hang', endpoints: [fakes.hang.url] },
      ],
      routing: { request_timeout: '1s', queue_timeout: '60s', retries: 2, keepalive_interval: '0s' },
      upstream: { first_byte_timeout: '60s', idle_timeout: '60s' },
    });
  });
  after(() => closeAll(gw, fakes));

  test('a request queued longer than request_timeout gets 504 in OpenAI shape', { timeout: TEST_TIMEOUT_MS }, async () => {
    fakes.parked.setHealth(500);
    await gw.waitForMetric('fleetgate_replicas', { model: 'parked', state: 'unhealthy' }, (v) => v === 1);
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('parked', { tag: 'queued' }));
    assert.equal(res.status, 504, res.text);
    const error = openAiError(res);
    assert.equal(error.code, 'request_timeout');
    assert.equal(fakes.parked.requestsWith('queued').length, 0, 'it never reached a phone');
    assert.equal((await gw.requestLog(res.requestId)).outcome, 'request_timeout');
  });

  test('a phone that never answers: 504 at the request deadline, long before first_byte_timeout', { timeout: TEST_TIMEOUT_MS }, async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('hang', { tag: 'hung' }), { timeoutMs: 20000 });
    assert.equal(res.status, 504, res.text);
    assert.equal(openAiError(res).code, 'request_timeout');
    assert.equal(fakes.hang.requestsWith('hung').length, 1, 'not retried once the deadline passed');
  });

  test('a stream still running at the deadline ends with an error event; the phone connection closes', { timeout: TEST_TIMEOUT_MS }, async () => {
    const { status, text } = await streamText(gw, chat('slow', { tag: 'slow-stream', stream: true }), { timeoutMs: 20000 });
    assert.equal(status, 200);
    const record = fakes.slow.requestsWith('slow-stream')[0];
    assert.ok(text.startsWith(record.sentPlain.slice(0, 20)), 'relayed events first');
    const errors = errorEvents(text);
    assert.equal(errors.length, 1, text.slice(-400));
    assert.equal(errors[0].error.code, 'request_timeout');
    assert.ok(text.endsWith('data: [DONE]\n\n'));
    await fakes.slow.waitFor(() => record.closedEarly, { what: 'the phone connection to close' });
    assert.ok(record.chunksSent < 400);
  });
});

// One streamed request on a raw socket with Connection: close; resolves with every byte received.
function rawStream(gw, body) {
  const { hostname, port } = new URL(gw.publicUrl);
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    const chunks = [];
    socket.on('data', (c) => chunks.push(c));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.on('error', reject);
    socket.setTimeout(10000, () => socket.destroy(new Error('raw stream timed out')));
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(payload)}\r\nConnection: close\r\n\r\n${payload}`,
    );
  });
}

describe('keep-alive comments', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.refuses = await startFakeReplica({
      name: 'refuses',
      mode: { type: 'status', status: 400, delayMs: 4, body: JSON.stringify({ error: { message: 'bad request', type: 'invalid_request_error', param: null, code: null } }) },
    });
    gw = await startGateway({
      models: [{ name: 'refuses', slots: 8, endpoints: [fakes.refuses.url] }],
      routing: { keepalive_interval: '1ms', retries: 0 },
      log: { level: 'warn' },
    });
  });
  after(() => closeAll(gw, fakes));

  test('are never written after the end of a stream (the ticker racing the last writes)', { timeout: TEST_TIMEOUT_MS }, async () => {
    // The phone refuses after the stream was opened by comments: the refusal becomes an error event
    // and the stream's last chunk. A comment queued meanwhile must not follow that last chunk.
    const rounds = 300;
    const parallel = 4;
    let next = 0;
    let streams = 0;
    const bad = [];
    async function worker() {
      while (next < rounds) {
        ++next;
        const raw = await rawStream(gw, chat('refuses', { stream: true }));
        assert.match(raw, /"error"/);
        if (!raw.startsWith('HTTP/1.1 200')) {
          continue; // the refusal came before the first comment: a plain 400, no stream to end
        }
        ++streams;
        const end = raw.indexOf('\r\n0\r\n\r\n');
        assert.ok(end > 0, `no last chunk: ${JSON.stringify(raw.slice(0, 300))}`);
        const tail = raw.slice(end + 7);
        if (tail.length > 0) {
          bad.push(tail);
        }
      }
    }
    await Promise.all(Array.from({ length: parallel }, worker));
    assert.ok(streams > 0, 'some refusals came after the stream was opened');
    assert.deepEqual(bad.slice(0, 3), [], `${bad.length} of ${streams} streams had bytes after their last chunk`);
  });
});
