// Failover: a replica that fails before anything reached the client (refused connection, 5xx/503,
// no first byte in time, broken answer) is replaced by another one, invisibly; after content went
// out a failure ends the stream with an error event; client departures close the upstream at once;
// keep-alive comments flow while a stream waits.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { closedPortUrl, startFakeReplica } from './lib/fake_replica.mjs';
import { openAiError, openStream, parseSse, postJson, startGateway, stopChecked } from './lib/gateway.mjs';

const chat = (model, extra = {}) => ({ model, messages: [{ role: 'user', content: 'is this a scam?' }], ...extra });

// Every data event of an SSE text that is an error object, parsed.
function errorEvents(text) {
  return parseSse(text)
    .filter((e) => e.data && e.data !== '[DONE]')
    .map((e) => JSON.parse(e.data))
    .filter((d) => d.error);
}

// The SSE text without comment lines (": keep-alive").
function withoutComments(text) {
  return parseSse(text)
    .filter((e) => e.data !== undefined)
    .map((e) => `data: ${e.data}\n\n`)
    .join('');
}

async function streamText(gw, body) {
  const s = await openStream(`${gw.publicUrl}/v1/chat/completions`, { body });
  return { status: s.status, headers: s.headers, requestId: s.requestId, text: await s.done };
}

describe('failover before any content reached the client', () => {
  const fakes = {};
  let refusedUrl;
  let gw;

  before(async () => {
    refusedUrl = await closedPortUrl();
    fakes.good1 = await startFakeReplica({ name: 'good1' });
    fakes.busy = await startFakeReplica({ name: 'busy', mode: { type: 'status', status: 503, headers: { 'Retry-After': '7' } } });
    fakes.good2 = await startFakeReplica({ name: 'good2' });
    fakes.hang = await startFakeReplica({ name: 'hang', mode: { type: 'hang' } });
    fakes.good3 = await startFakeReplica({ name: 'good3' });
    fakes.partial = await startFakeReplica({ name: 'partial', mode: { type: 'partial' } });
    fakes.good4 = await startFakeReplica({ name: 'good4' });
    fakes.lonePartial = await startFakeReplica({ name: 'lonePartial', mode: { type: 'partial' } });
    gw = await startGateway({
      models: [
        { name: 'refuse', endpoints: [refusedUrl, fakes.good1.url] },
        { name: 'busy', endpoints: [fakes.busy.url, fakes.good2.url] },
        { name: 'hang', endpoints: [fakes.hang.url, fakes.good3.url] },
        { name: 'partial', endpoints: [fakes.partial.url, fakes.good4.url] },
        { name: 'lone-partial', endpoints: [fakes.lonePartial.url] },
      ],
      routing: { retries: 2, queue_timeout: '10s' },
      // first_byte_timeout: long enough that a good replica on a loaded machine (or under the
      // sanitizers) never trips it, short enough that the hanging one costs little.
      upstream: { connect_timeout: '2s', first_byte_timeout: '1500ms', idle_timeout: '2s' },
    });
  });
  after(async () => {
    await stopChecked(gw);
    for (const f of Object.values(fakes)) {
      await f.close();
    }
  });

  // Sends `count` requests one after the other (alternating non-streaming and streaming) and checks
  // each succeeds with exactly the good replica's bytes; returns the request log lines.
  async function allSucceed(model, good, count, tagPrefix, { streams = true } = {}) {
    const logs = [];
    for (let i = 0; i < count; ++i) {
      const tag = `${tagPrefix}-${i}`;
      const stream = streams && i % 2 === 1;
      let status;
      let text;
      let requestId;
      if (stream) {
        ({ status, text, requestId } = await streamText(gw, chat(model, { tag, stream: true })));
        assert.deepEqual(errorEvents(text), [], 'no error event reaches the client');
      } else {
        const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat(model, { tag }));
        ({ status, text, requestId } = res);
      }
      assert.equal(status, 200, `request ${tag}: ${text}`);
      const served = good.requestsWith(`"${tag}"`);
      assert.equal(served.length, 1, `request ${tag} was served by ${good.name}`);
      assert.equal(text, served[0].sentPlain, 'the client gets the good replica bytes, nothing of the failed attempt');
      logs.push(await gw.requestLog(requestId));
    }
    return logs;
  }

  test('a refusing replica (closed port) is skipped without a client error', async () => {
    const logs = await allSucceed('refuse', fakes.good1, 6, 'refuse');
    assert.ok(logs.some((l) => l.attempts >= 2), `some request should have tried the closed port first: ${JSON.stringify(logs.map((l) => l.attempts))}`);
    for (const l of logs) {
      assert.equal(l.status, 200);
      assert.equal(l.outcome, 'ok');
    }
  });

  test('a replica answering 503 is retried elsewhere', async () => {
    const logs = await allSucceed('busy', fakes.good2, 4, 'busy');
    assert.ok(fakes.busy.requests.length >= 1, 'the 503 replica was tried');
    assert.ok(logs.some((l) => l.attempts >= 2));
  });

  test('a hanging replica is abandoned after first_byte_timeout and the request retried', async () => {
    const logs = await allSucceed('hang', fakes.good3, 4, 'hang');
    assert.ok(fakes.hang.requests.length >= 1, 'the hanging replica was tried');
    assert.ok(logs.some((l) => l.attempts >= 2));
    // The gateway gave up on the hanging exchanges: their connections are closed.
    await fakes.hang.waitFor((f) => f.requests.every((r) => r.closedEarly), { what: 'the hanging connections to close' });
  });

  test('a non-streaming answer cut in the middle is retried (nothing was sent to the client yet)', async () => {
    const logs = await allSucceed('partial', fakes.good4, 4, 'partial', { streams: false });
    assert.ok(logs.some((l) => l.attempts >= 2));
    assert.ok(fakes.partial.requests.length >= 1, 'the breaking replica was tried');
  });

  test('a non-streaming answer cut in the middle with no other replica: 502, not a truncated 200', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('lone-partial'));
    assert.ok([502, 503, 504].includes(res.status), `status ${res.status}: ${res.text}`);
    openAiError(res);
  });
});

describe('when every replica fails', () => {
  const fakes = {};
  let gw;

  before(async () => {
    const refused = await closedPortUrl();
    fakes.err500 = await startFakeReplica({ name: 'err500', mode: { type: 'status', status: 500 } });
    fakes.busyA = await startFakeReplica({ name: 'busyA', mode: { type: 'status', status: 503 } });
    fakes.busyB = await startFakeReplica({ name: 'busyB', mode: { type: 'status', status: 429 } });
    fakes.hangA = await startFakeReplica({ name: 'hangA', mode: { type: 'hang' } });
    fakes.hangB = await startFakeReplica({ name: 'hangB', mode: { type: 'hang' } });
    fakes.err500b = await startFakeReplica({ name: 'err500b', mode: { type: 'status', status: 500 } });
    fakes.err500c = await startFakeReplica({ name: 'err500c', mode: { type: 'status', status: 500 } });
    gw = await startGateway({
      models: [
        { name: 'doomed', endpoints: [refused, fakes.err500.url] },
        { name: 'busy', endpoints: [fakes.busyA.url, fakes.busyB.url] },
        { name: 'hang', endpoints: [fakes.hangA.url, fakes.hangB.url] },
        { name: 'broken', endpoints: [fakes.err500b.url, fakes.err500c.url] },
      ],
      routing: { retries: 2, queue_timeout: '5s' },
      upstream: { connect_timeout: '2s', first_byte_timeout: '400ms' },
    });
  });
  after(async () => {
    await stopChecked(gw);
    for (const f of Object.values(fakes)) {
      await f.close();
    }
  });

  test('refused + 500: a 5xx OpenAI error', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('doomed'));
    assert.ok([502, 503, 504].includes(res.status), `status ${res.status}: ${res.text}`);
    const error = openAiError(res);
    assert.equal(error.type, 'server_error');
    assert.ok(res.requestId);
    assert.ok(fakes.err500.requests.length >= 1);
  });

  test('all answering 500: the gateway answers 502/503/504 with its own OpenAI error', async () => {
    for (const stream of [false, true]) {
      const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('broken', { stream }));
      assert.ok([502, 503, 504].includes(res.status), `stream=${stream}: status ${res.status}: ${res.text}`);
      assert.equal(openAiError(res).type, 'server_error');
    }
  });

  test('all busy (503/429): 503 with Retry-After', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('busy'));
    assert.equal(res.status, 503, res.text);
    assert.match(res.headers['retry-after'] ?? '', /^\d+$/);
    openAiError(res);
    assert.ok(fakes.busyA.requests.length >= 1 && fakes.busyB.requests.length >= 1, 'both replicas tried');
    assert.ok(fakes.busyA.requests.length + fakes.busyB.requests.length <= 3, 'at most 1 + routing.retries attempts');
  });

  test('all hanging: 504 after the first-byte timeouts', async () => {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chat('hang'));
    assert.equal(res.status, 504, res.text);
    openAiError(res);
    const log = await gw.requestLog(res.requestId);
    assert.equal(log.attempts, 3, 'one attempt and routing.retries retries, each ended by its first-byte timeout');
    assert.ok(fakes.hangA.requests.length >= 1 && fakes.hangB.requests.length >= 1, 'both replicas tried');
  });

  test('streaming, all failing: an OpenAI error (status or error event), never a hang', async () => {
    const s = await openStream(`${gw.publicUrl}/v1/chat/completions`, { body: chat('doomed', { stream: true }) });
    const text = await s.done;
    if (s.status === 200) {
      assert.equal(errorEvents(text).length, 1, text);
      assert.ok(text.endsWith('data: [DONE]\n\n'));
    } else {
      assert.ok([502, 503, 504].includes(s.status), `status ${s.status}`);
      assert.ok(JSON.parse(text).error);
    }
  });
});

describe('after content reached the client', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.breakA = await startFakeReplica({ name: 'breakA', mode: { type: 'break', chunks: 5, afterChunks: 2, intervalMs: 30 } });
    fakes.breakB = await startFakeReplica({ name: 'breakB', mode: { type: 'break', chunks: 5, afterChunks: 2, intervalMs: 30 } });
    fakes.stall = await startFakeReplica({ name: 'stall', mode: { type: 'stream', chunks: 3, intervalMs: 3000 } });
    // 100 s of stream: the client leaving always comes long before its end, however loaded the machine.
    fakes.long = await startFakeReplica({ name: 'long', mode: { type: 'stream', chunks: 2000, intervalMs: 50 } });
    gw = await startGateway({
      models: [
        { name: 'breaks', endpoints: [fakes.breakA.url, fakes.breakB.url] },
        { name: 'stall', endpoints: [fakes.stall.url] },
        { name: 'long', slots: 1, endpoints: [fakes.long.url] },
      ],
      routing: { retries: 2 },
      upstream: { first_byte_timeout: '5s', idle_timeout: '600ms' },
    });
  });
  after(async () => {
    await stopChecked(gw);
    for (const f of Object.values(fakes)) {
      await f.close();
    }
  });

  test('a replica dying mid-stream: the client gets the relayed events, an SSE error event, then [DONE]; no retry', async () => {
    const { status, text, requestId } = await streamText(gw, chat('breaks', { stream: true }));
    assert.equal(status, 200);
    const all = [...fakes.breakA.requests, ...fakes.breakB.requests];
    assert.equal(all.length, 1, 'not retried once content went out');
    const sent = all[0].sentPlain;
    assert.equal(all[0].chunksSent, 2);
    assert.ok(text.startsWith(sent), 'the events sent before the failure are relayed unchanged');
    const rest = text.slice(sent.length);
    const events = parseSse(rest);
    assert.equal(events.length, 2, `after the relayed events: one error event and [DONE], got ${JSON.stringify(rest)}`);
    const error = JSON.parse(events[0].data).error;
    assert.equal(typeof error.message, 'string');
    assert.equal(typeof error.type, 'string');
    assert.equal(events[1].data, '[DONE]');
    const log = await gw.requestLog(requestId);
    assert.notEqual(log.outcome, 'ok');
  });

  test('a stream silent for longer than idle_timeout ends with an error event and the upstream is closed', async () => {
    const { status, text } = await streamText(gw, chat('stall', { tag: 'stalled', stream: true }));
    assert.equal(status, 200);
    const record = fakes.stall.requestsWith('stalled')[0];
    assert.ok(!record.finished && record.chunksSent < 3, 'ended by idle_timeout, not by the replica');
    assert.equal(errorEvents(text).length, 1, text);
    assert.ok(text.endsWith('data: [DONE]\n\n'));
    await fakes.stall.waitFor(() => record.closedEarly, { what: 'the stalled upstream connection to close' });
  });

  test('a client leaving while its non-streaming request is at the replica closes the upstream connection', async () => {
    const controller = new AbortController();
    const leaving = postJson(gw.publicUrl, '/v1/chat/completions', chat('long', { tag: 'prefill-leaver', fake: { type: 'hang' } }), {
      signal: controller.signal,
      headers: { 'X-Request-Id': 'prefill-leaver-1' },
    });
    leaving.catch(() => {});
    await fakes.long.waitFor((f) => f.requestsWith('prefill-leaver').length === 1, { what: 'the request at the replica' });
    controller.abort();
    const record = fakes.long.requestsWith('prefill-leaver')[0];
    await fakes.long.waitFor(() => record.closedEarly, { what: 'the replica connection to close' });
    // Closed because the client left, not by first_byte_timeout.
    assert.equal((await gw.requestLog('prefill-leaver-1')).outcome, 'client_gone');
    const next = await postJson(gw.publicUrl, '/v1/chat/completions', chat('long', { tag: 'after-prefill-leaver', fake: { type: 'json' } }), { timeoutMs: 5000 });
    assert.equal(next.status, 200, 'the slot was freed');
  });

  test('a client leaving mid-stream closes the upstream connection, and the slot is freed', async () => {
    let left = false;
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
      body: chat('long', { tag: 'leaver', stream: true }),
      headers: { 'X-Request-Id': 'leaver-1' },
      onData: (text, s) => {
        if (!left && text.includes('data:')) {
          left = true;
          s.destroy();
        }
      },
    });
    assert.equal(stream.status, 200);
    // '"leaver"' with its quotes: the previous test's "prefill-leaver" contains leaver too.
    const record = fakes.long.requestsWith('"leaver"')[0];
    await fakes.long.waitFor(() => record.closedEarly, { what: 'the replica connection to close' });
    assert.ok(left);
    assert.ok(record.chunksSent < 1000, 'the replica stopped generating long before the end');
    // The only slot is free again.
    const next = await postJson(gw.publicUrl, '/v1/chat/completions', chat('long', { tag: 'next', fake: { type: 'json' } }), { timeoutMs: 5000 });
    assert.equal(next.status, 200);
    const log = await gw.requestLog('leaver-1');
    assert.equal(log.outcome, 'client_gone');
    assert.equal(log.model, 'long');
  });
});

describe('keep-alive comments', () => {
  const fakes = {};
  let gw;

  before(async () => {
    fakes.one = await startFakeReplica({ name: 'one' });
    fakes.slow = await startFakeReplica({ name: 'slow' });
    fakes.hang = await startFakeReplica({ name: 'hangK', mode: { type: 'hang' } });
    fakes.good = await startFakeReplica({ name: 'goodK' });
    gw = await startGateway({
      models: [
        { name: 'one', slots: 1, endpoints: [fakes.one.url] },
        { name: 'slow', endpoints: [fakes.slow.url] },
        { name: 'flaky', endpoints: [fakes.hang.url, fakes.good.url] },
      ],
      routing: { keepalive_interval: '200ms', retries: 2, queue_timeout: '2s' },
      upstream: { first_byte_timeout: '1500ms' },
    });
  });
  after(async () => {
    await stopChecked(gw);
    for (const f of Object.values(fakes)) {
      await f.close();
    }
  });

  test('a streaming request waiting in the queue receives ": keep-alive" comments, then its stream', async () => {
    const holder = postJson(gw.publicUrl, '/v1/chat/completions', chat('one', { tag: 'holder', fake: { type: 'hold' } }));
    await fakes.one.waitFor((f) => f.requests.length === 1, { what: 'the holder' });
    let resolveTwo;
    const twoComments = new Promise((r) => {
      resolveTwo = r;
    });
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
      body: chat('one', { tag: 'waiter', stream: true }),
      onData: (_, s) => {
        if ((s.text().match(/^: ?keep-alive/gm) ?? []).length >= 2) {
          resolveTwo();
        }
      },
    });
    assert.equal(stream.status, 200);
    assert.match(stream.headers['content-type'], /^text\/event-stream/);
    await twoComments;
    assert.equal(fakes.one.requestsWith('waiter').length, 0, 'still queued while the comments arrive');
    assert.ok(!stream.text().includes('data:'));
    fakes.one.release();
    assert.equal((await holder).status, 200);
    const text = await stream.done;
    const served = fakes.one.requestsWith('waiter')[0];
    assert.equal(withoutComments(text), served.sentPlain, 'the stream itself is intact after the comments');
    assert.ok(text.endsWith('data: [DONE]\n\n'));
  });

  test('a queue timeout after keep-alive comments ends the stream with an error event', async () => {
    // The slot is taken by a long stream (400 events, 100 ms apart: 40 s, far longer than the 2 s
    // queue_timeout however loaded the machine): busy, but never timing out. Dropped at the end.
    const holder = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
      body: chat('one', { tag: 'holder2', stream: true, fake: { type: 'stream', chunks: 400, intervalMs: 100 } }),
    });
    await fakes.one.waitFor((f) => f.requestsWith('holder2').length === 1, { what: 'the holder' });
    const { status, text, requestId } = await streamText(gw, chat('one', { tag: 'late-waiter', stream: true }));
    assert.equal(status, 200, 'the head went out with the first comment');
    assert.match(text, /^: ?keep-alive/m);
    const errors = errorEvents(text);
    assert.equal(errors.length, 1, text);
    assert.equal(errors[0].error.code, 'queue_timeout', 'ended by routing.queue_timeout');
    assert.equal((await gw.requestLog(requestId)).outcome, 'queue_timeout');
    assert.ok(text.endsWith('data: [DONE]\n\n'));
    assert.equal(fakes.one.requestsWith('late-waiter').length, 0);
    holder.destroy();
    await fakes.one.waitFor((f) => f.inFlight === 0, { what: 'the holder to end' });
  });

  test('keep-alive comments also flow while waiting for the first byte', async () => {
    // The replica holds its answer until the client has seen two comments (an event, not a time;
    // first_byte_timeout 1500ms is far longer than two 200 ms intervals).
    let released = false;
    const stream = await openStream(`${gw.publicUrl}/v1/chat/completions`, {
      body: chat('slow', { tag: 'first-byte-waiter', stream: true, fake: { type: 'hold' } }),
      onData: (_, s) => {
        if (!released && (s.text().match(/^: ?keep-alive/gm) ?? []).length >= 2) {
          released = true;
          fakes.slow.release();
        }
      },
    });
    assert.equal(stream.status, 200);
    const text = await stream.done;
    assert.ok(released, 'two comments before the first byte');
    assert.equal(withoutComments(text), fakes.slow.requestsWith('first-byte-waiter')[0].sentPlain);
  });

  test('keep-alive comments do not count as content: a request is still retried after them', async () => {
    let retried = 0;
    for (let i = 0; i < 2; ++i) {
      const { status, text, requestId } = await streamText(gw, chat('flaky', { tag: `flaky-${i}`, stream: true }));
      assert.equal(status, 200);
      assert.deepEqual(errorEvents(text), [], text);
      const served = fakes.good.requestsWith(`flaky-${i}`);
      assert.equal(served.length, 1);
      assert.equal(withoutComments(text), served[0].sentPlain);
      const log = await gw.requestLog(requestId);
      if (log.attempts >= 2) {
        ++retried;
        assert.match(text, /^: ?keep-alive/m, 'comments went out while the first replica hung');
      }
    }
    assert.ok(retried >= 1, 'one of the two requests went to the hanging replica first');
    assert.ok(fakes.hang.requests.length >= 1);
  });
});
