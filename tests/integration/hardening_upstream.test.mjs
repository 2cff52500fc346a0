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
