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
import { openAiError, openStream, parseSse, postJson, startGateway, stopChecked } from './lib/gateway.mjs';

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

describe('a pooled connection is never reused with unread bytes on it', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.trailing = await startFakeReplica({ name: 'trailing' });
    gw = await startGateway({ models: [{ name: 'trailing', slots: 1, endpoints: [fakes.trailing.url] }], routing: { retries: 0 } });
  });
  after(() => closeAll(gw, fakes));

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
