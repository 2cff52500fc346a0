// Chaos: hostile clients against one gateway with healthy phones: 1,000 slowloris connections
// (headers one byte at a time), idle connections up to server.max_connections and past it, stream
// readers that never read, pipelined garbage, many connections each sending a body of the
// largest size at once (held within server.max_buffered_bytes). Throughout (lib/invariants.mjs): the gateway never
// dies, its RSS stays under RSS_BOUND, the healthy phones stay healthy (probes are never starved)
// and keep serving a control client on a connection opened before the attacks; every request
// that was answered got exactly one answer, and no connection is held past its timeout.
//
// 1,000 connections need more than 1,024 file descriptors in this process and in the gateway:
// ctest runs this file under tests/chaos/with_fd_limit.sh (raises the soft limit); the gateway
// raises its own soft limit to the hard one at start.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from '../integration/lib/fake_replica.mjs';
import { eventually, startGateway, stopChecked } from '../integration/lib/gateway.mjs';
import { openFileLimits, rawConnect } from '../integration/lib/raw_client.mjs';
import { startHostilePhone } from './lib/hostile_phone.mjs';
import { MiB, RSS_BOUND, Watch, assertAllTerminal, parseResponse, terminalAnswer } from './lib/invariants.mjs';

const MAX_CONNECTIONS = 1100;
const SLOWLORIS = 1000;
const HEADER_TIMEOUT_MS = 3000;
const WRITE_TIMEOUT_MS = 2000;
const GRACE_MS = 15000; // for a loaded 2-core machine: a connection still open then is held too long
// The healthy phone's probes: it must stay healthy through every attack, i.e. the gateway must
// keep answering it within seconds. Not tighter: with the rest of the suite beside it on 2 cores,
// 40 bodies of 4 MiB held the io thread past three 400 ms probes (sanitized suite 3 of 3 runs,
// the ordinary one once, 2026-12-04; never alone), and how long a large body may delay other
// work is a benchmark figure (issue 16's 4 MiB target, open), not a timed assertion in a test.
const PROBES = { interval: '2s', timeout: '1500ms', unhealthy_after: 3, healthy_after: 1, eject_after: 3 };
const MAX_BODY = 4 * MiB;
// server.max_buffered_bytes: request bodies held at once. Before it existed, the last scenario
// took the gateway past the RSS bound (every queued body is held until its request ends), and
// parsing them all at once starved the healthy phone's probes so that it was marked unhealthy.
const MAX_BUFFERED = 16 * MiB;
const FDS_NEEDED = 2 * MAX_CONNECTIONS + 256;
const TEST_TIMEOUT = { timeout: 120000 };

function ownFileLimit() {
  const line = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
  return Number(line.replace('Max open files', '').trim().split(/\s+/)[0]);
}

// Opens `count` raw connections, `batch` at a time.
async function connectMany(url, count, batch = 100) {
  const out = [];
  while (out.length < count) {
    const n = Math.min(batch, count - out.length);
    out.push(...(await Promise.all(Array.from({ length: n }, () => rawConnect(url)))));
  }
  return out;
}

async function allClosed(clients, what) {
  await eventually(() => clients.every((c) => c.isClosed), {
    timeoutMs: GRACE_MS, everyMs: 100, what: `${what}: ${clients.filter((c) => !c.isClosed).length} connections still open`,
  });
}

describe('chaos: hostile clients', () => {
  let gw;
  let phone; // model m, healthy
  let firehose; // model s: long, fast streams
  let slow; // model q: answers after half a second
  let watch;

  before(async () => {
    assert.ok(ownFileLimit() >= FDS_NEEDED,
      `this test needs ${FDS_NEEDED} file descriptors, the soft limit is ${ownFileLimit()}: run it with tests/chaos/with_fd_limit.sh (ctest does)`);
    phone = await startFakeReplica({ name: 'healthy' });
    firehose = await startHostilePhone({ name: 'firehose', model: 's' });
    firehose.setMode('firehose');
    slow = await startFakeReplica({ name: 'slow', mode: { type: 'json', delayMs: 500 } });
    gw = await startGateway({
      server: {
        max_connections: MAX_CONNECTIONS,
        max_connections_per_ip: 0,
        header_timeout: `${HEADER_TIMEOUT_MS}ms`,
        body_timeout: '30s',
        idle_timeout: '60s',
        write_timeout: `${WRITE_TIMEOUT_MS}ms`,
        max_body_bytes: MAX_BODY,
        max_buffered_bytes: MAX_BUFFERED,
      },
      routing: { request_timeout: '40s', queue_timeout: '30s' },
      health: PROBES,
      models: [
        { name: 'm', endpoints: [{ url: phone.url, slots: 4 }] },
        { name: 's', endpoints: [{ url: firehose.url, slots: 20 }] },
        { name: 'q', endpoints: [{ url: slow.url, slots: 4 }] },
      ],
    });
    assert.ok(openFileLimits(gw.pid).soft >= FDS_NEEDED, `the gateway's descriptor limit: ${JSON.stringify(openFileLimits(gw.pid))}`);
    watch = await new Watch({
      gw, healthy: [{ url: phone.url, model: 'm' }], control: { model: 'm' }, rssBoundBytes: RSS_BOUND, deadlineMs: GRACE_MS,
    }).start();
  });

  after(async () => {
    await watch?.stop();
    if (watch) {
      console.log(watch.report('hostile clients'));
    }
    await stopChecked(gw);
    await phone?.close();
    await firehose?.close();
    await slow?.close();
  });

  const openPublic = () => gw.metric('fleetgate_connections_open', { listener: 'public' });
  const refused = async (reason) => (await gw.metric('fleetgate_requests_refused_total', { listener: 'public', reason })) ?? 0;

  test(`${SLOWLORIS} slowloris connections, headers one byte at a time, are cut at server.header_timeout`, TEST_TIMEOUT, async () => {
    watch.begin('1,000 slowloris connections');
    const before = await refused('header_timeout');
    const clients = await connectMany(gw.publicUrl, SLOWLORIS);
    const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: chaos\r\nX-Slow: ';
    let i = 0;
    // One byte per connection every 250 ms: every read comes well within the timeout.
    const trickle = setInterval(() => {
      for (const c of clients) {
        if (!c.isClosed) {
          c.socket.write(head[i % head.length]);
        }
      }
      ++i;
    }, 250);
    try {
      await gw.waitForMetric('fleetgate_connections_open', { listener: 'public' }, (v) => v >= SLOWLORIS, { timeoutMs: GRACE_MS });
      await allClosed(clients, 'slowloris');
    } finally {
      clearInterval(trickle);
      clients.forEach((c) => c.destroy());
    }
    assert.deepEqual(clients.filter((c) => c.received !== '').map((c) => c.received.slice(0, 80)).slice(0, 3), [],
      'a slow client is cut, never answered');
    await gw.waitForMetric('fleetgate_requests_refused_total', { listener: 'public', reason: 'header_timeout' },
      (v) => v - before === SLOWLORIS, { timeoutMs: GRACE_MS });
    await watch.checkpoint('1,000 slowloris connections');
  });

  test('idle connections up to server.max_connections and past it', TEST_TIMEOUT, async () => {
    watch.begin('idle connections to the cap and past it');
    await eventually(async () => (await openPublic()) === 1, { timeoutMs: GRACE_MS, what: 'only the control connection open' });
    const rejectedBefore = (await gw.metric('fleetgate_connections_rejected_total', { listener: 'public', reason: 'max_connections' })) ?? 0;
    // The control client's connection is one of the places.
    const idle = await connectMany(gw.publicUrl, MAX_CONNECTIONS - 1);
    const past = [];
    try {
      await gw.waitForMetric('fleetgate_connections_open', { listener: 'public' }, (v) => v === MAX_CONNECTIONS, { timeoutMs: GRACE_MS });
      past.push(...(await connectMany(gw.publicUrl, 100)));
      await allClosed(past, 'connections past the cap');
      assert.ok(past.every((c) => c.received === ''), 'closed without an answer');
      await gw.waitForMetric('fleetgate_connections_rejected_total', { listener: 'public', reason: 'max_connections' },
        (v) => v - rejectedBefore === 100, { timeoutMs: GRACE_MS });
      // The control client kept being served on its connection meanwhile; make sure it was, with
      // the listener full.
      const served = watch.controlOk;
      await eventually(() => watch.controlOk >= served + 3 || watch.controlFailures.length > 0, {
        timeoutMs: GRACE_MS, what: 'control requests while the listener is full',
      });
      await watch.checkpoint('idle connections to the cap and past it');
    } finally {
      idle.forEach((c) => c.destroy());
      past.forEach((c) => c.destroy());
    }
    // A place that frees is usable again.
    await eventually(async () => (await openPublic()) === 1, { timeoutMs: GRACE_MS, what: 'the idle connections gone' });
  });

  test('stream readers that never read are dropped after server.write_timeout and their slots freed', TEST_TIMEOUT, async () => {
    watch.begin('stream readers that never read');
    const before = (await gw.metric('fleetgate_session_failures_total', { listener: 'public', kind: 'write_timeout' })) ?? 0;
    const readers = [];
    const body = JSON.stringify({ model: 's', stream: true, messages: [{ role: 'user', content: 'a very long answer' }] });
    try {
      for (let i = 0; i < 20; ++i) {
        const c = await rawConnect(gw.publicUrl);
        c.socket.pause(); // never reads
        await c.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: chaos\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
        readers.push(c);
      }
      await gw.waitForMetric('fleetgate_session_failures_total', { listener: 'public', kind: 'write_timeout' },
        (v) => v - before === 20, { timeoutMs: GRACE_MS + WRITE_TIMEOUT_MS });
      await eventually(() => firehose.inFlight === 0, { timeoutMs: GRACE_MS, what: `the phone's requests ended (${firehose.inFlight} left)` });
      assert.ok(firehose.requests >= 20 && firehose.maxInFlight <= 20, `the phone held ${firehose.maxInFlight} at most (slots 20)`);
      await watch.checkpoint('stream readers that never read');
    } finally {
      readers.forEach((c) => c.destroy());
    }
  });

  test('pipelined garbage: the requests before it are answered once each, then 400 and close', TEST_TIMEOUT, async () => {
    watch.begin('pipelined garbage');
    const chat = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'pipelined' }] });
    const valid = `POST /v1/chat/completions HTTP/1.1\r\nHost: chaos\r\nContent-Type: application/json\r\nContent-Length: ${chat.length}\r\n\r\n${chat}`;
    const models = 'GET /v1/models HTTP/1.1\r\nHost: chaos\r\n\r\n';
    const garbage = [
      '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage-tls-hello\r\n\r\n',
      'GET / HTTP/9.9\r\n\r\n',
      'POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n',
      'POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      'POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n',
      'GET /v1/models HTTP/1.1\r\nHost: a\r\nBad Header Line\r\n\r\n',
      `${'\x00'.repeat(64)}\r\n\r\n`,
    ];
    const cases = [];
    // 100 connections: each sends some valid requests and then garbage in one write.
    for (let i = 0; i < 100; ++i) {
      const before = i % 3;
      cases.push({ bytes: (i % 2 ? models : valid).repeat(before) + garbage[i % garbage.length] + valid.repeat(3), answered: before });
    }
    const clients = await Promise.all(cases.map(() => rawConnect(gw.publicUrl)));
    try {
      await Promise.all(clients.map((c, i) => c.write(cases[i].bytes)));
      await allClosed(clients, 'pipelined garbage');
      for (const [i, c] of clients.entries()) {
        const answers = [];
        let rest = c.received;
        while (rest.length > 0) {
          const res = parseResponse(rest, { closed: true });
          assert.ok(res, `case ${i}: an incomplete answer: ${JSON.stringify(rest.slice(0, 120))}`);
          answers.push(res.status);
          rest = rest.slice(res.consumed);
        }
        // A chunked head counts at server.max_body_bytes against server.max_buffered_bytes: with
        // many at once, the budget may answer it (503 server_busy) before its garbage is read.
        const last = answers.pop();
        const chunkedHead = /^POST [^\r]*\r\nTransfer-Encoding: chunked/.test(garbage[i % garbage.length]);
        const what = `case ${i} (${JSON.stringify(garbage[i % garbage.length].slice(0, 30))}): ${answers} ${last}`;
        assert.deepEqual(answers, Array(cases[i].answered).fill(200), what);
        assert.ok(last === 400 || (chunkedHead && last === 503), what);
      }
    } finally {
      clients.forEach((c) => c.destroy());
    }
    await watch.checkpoint('pipelined garbage');
  });

  test('40 connections each sending a 4 MiB body at once: held within server.max_buffered_bytes', TEST_TIMEOUT, async () => {
    watch.begin('40 bodies of 4 MiB at once');
    const busyBefore = await refused('server_busy');
    const body = JSON.stringify({ model: 'q', messages: [{ role: 'user', content: 'a'.repeat(MAX_BODY - 1024) }] });
    const results = await Promise.all(Array.from({ length: 40 }, () =>
      terminalAnswer(gw.publicUrl, '/v1/chat/completions', body, { deadlineMs: 4 * GRACE_MS })));
    assertAllTerminal(results, '40 bodies of 4 MiB');
    const statuses = results.map((r) => r.status);
    assert.ok(statuses.every((s) => s === 200 || s === 503), `200 or 503 only: ${statuses}`);
    assert.ok(statuses.includes(200), 'some were served');
    const busy = results.filter((x) => x.status === 503);
    for (const r of busy) {
      assert.match(r.body, /server_busy/);
      assert.equal(r.headers['retry-after'], '1');
    }
    assert.equal((await refused('server_busy')) - busyBefore, busy.length, 'counted in fleetgate_requests_refused_total');
    await watch.checkpoint('40 bodies of 4 MiB at once');
  });
});
