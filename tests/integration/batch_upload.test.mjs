// POST /v1/files streams its body (docs/batch.md, "Uploads"): a file far over
// server.max_body_bytes (4 MiB, left at its default here) is uploaded with the official openai
// client, stored byte for byte, with the gateway's peak RSS clearly below the file's size; a file
// over batch.max_file_bytes or batch.max_file_lines gets a 413 in OpenAI's error shape; an
// unauthenticated upload is refused from its head, before any body byte is sent; a client that
// leaves mid-upload leaves no file record and no chunk behind, and one killed mid-upload leaves
// nothing the next start does not remove. SQLite (the file bodies live in
// its database file, which the test reads with the sqlite3 command-line tool).

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { REPO_ROOT, eventually, makeTempDir, openAiError, removeDir, startGateway, stopChecked } from './lib/gateway.mjs';
import { rawConnect } from './lib/raw_client.mjs';
import { SANITIZE } from './lib/sanitize.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent');
const MODEL = 'qwen3.5-0.8b';
const KEY = 'sk-upload-test';
const MIB = 1024 * 1024;
const UPLOADING = 0; // storage::FileState::uploading in the files table

const { default: OpenAI } = await import('openai');

function vm(pid) {
  const text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`${name}:\\s+(\\d+)`).exec(text)[1]) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

function sql(db, query) {
  return execFileSync('sqlite3', [db, query], { encoding: 'utf8' }).trim();
}

// A JSONL file of `lines` batch lines, about `bytes` long, written to `file`.
function writeJsonl(file, lines, bytes) {
  const pad = 'x'.repeat(Math.max(0, Math.floor(bytes / lines) - 150));
  const fd = fs.openSync(file, 'w');
  let block = '';
  for (let i = 0; i < lines; i++) {
    block +=
      JSON.stringify({
        custom_id: `tx-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: `Case ${i} ${pad}` }] },
      }) + '\n';
    if (block.length > MIB) {
      fs.writeSync(fd, block);
      block = '';
    }
  }
  fs.writeSync(fd, block);
  fs.closeSync(fd);
}

function sha256File(file) {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

// A multipart head for a raw upload; the file part's bytes follow, then `tail`.
const BOUNDARY = 'fgUploadBoundary';
const PART_HEAD =
  `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
  `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="raw.jsonl"\r\n` +
  'Content-Type: application/octet-stream\r\n\r\n';
const TAIL = `\r\n--${BOUNDARY}--\r\n`;

function uploadHead(gw, { key = KEY, length, expect = false }) {
  const host = new URL(gw.publicUrl).host;
  return (
    `POST /v1/files HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${key}\r\n` +
    `Content-Type: multipart/form-data; boundary=${BOUNDARY}\r\nContent-Length: ${length}\r\n` +
    (expect ? 'Expect: 100-continue\r\n' : '') +
    '\r\n'
  );
}

// Starts a raw 10 MiB upload, sends 3 MiB of it and waits until chunks of the unfinished upload
// are in the database (the record stays invisible); resolves with the client, left open.
async function startUnfinishedUpload(gw, db, fill) {
  const client = await rawConnect(gw.publicUrl);
  const length = Buffer.byteLength(PART_HEAD) + 10 * MIB + Buffer.byteLength(TAIL);
  await client.write(uploadHead(gw, { length }) + PART_HEAD);
  await client.write(Buffer.alloc(3 * MIB, fill));
  await eventually(() => Number(sql(db, `select count(*) from file_chunks where file_id in (select id from files where state = ${UPLOADING})`)) >= 2, {
    timeoutMs: 20000,
    what: 'chunks of the upload stored',
  });
  return client;
}

async function uploadFetch(gw, body) {
  const form = new FormData();
  form.append('purpose', 'batch');
  form.append('file', new Blob([body]), 'small.jsonl');
  const res = await fetch(`${gw.publicUrl}/v1/files`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}` }, body: form });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, text, json };
}

describe('POST /v1/files streams the upload', () => {
  let dir;
  let gw;
  let db;

  before(async () => {
    dir = makeTempDir('fleetgate-upload-');
    db = path.join(dir, 'batch.db');
    gw = await startGateway(
      {
        server: { api_keys_env: 'FG_IT_UPLOAD_KEYS' },
        models: [{ name: MODEL, local: { count: 1, engine: 'sim', profile: 'fast-test', time_scale: 20, slots: 1 } }],
        health: { interval: '300ms', timeout: '200ms' },
        storage: { path: db },
        batch: { max_file_bytes: 32 * MIB, max_file_lines: 200000 },
      },
      { env: { FLEETGATE_AGENT_BIN: AGENT_BIN, FG_IT_UPLOAD_KEYS: KEY }, timeoutMs: 15000 },
    );
  });
  after(async () => {
    await stopChecked(gw);
    removeDir(dir);
  });

  test('a 20 MiB, 100,000-line file (5x server.max_body_bytes) with bounded gateway RSS', async () => {
    const file = path.join(dir, 'big.jsonl');
    writeJsonl(file, 100000, 20 * MIB);
    const size = fs.statSync(file).size;
    assert.ok(size > 19 * MIB, `${size}`);
    const start = vm(gw.pid);
    const openai = new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: KEY, maxRetries: 0, timeout: 300000 });
    const uploaded = await openai.files.create({ file: fs.createReadStream(file), purpose: 'batch' });
    assert.equal(uploaded.object, 'file');
    assert.equal(uploaded.bytes, size);
    assert.equal(uploaded.purpose, 'batch');
    const afterUpload = vm(gw.pid);
    // The bytes as uploaded, and so their lines.
    const res = await openai.files.content(uploaded.id);
    const back = Buffer.from(await res.arrayBuffer());
    assert.equal(back.length, size);
    assert.equal(crypto.createHash('sha256').update(back).digest('hex'), sha256File(file));
    assert.equal(back.toString('latin1').split('\n').filter(Boolean).length, 100000);
    const end = vm(gw.pid);
    const grew = Math.max(afterUpload.hwm, end.hwm) - start.rss;
    console.log(
      `upload of ${(size / MIB).toFixed(1)} MiB: gateway RSS ${(start.rss / MIB).toFixed(1)} MiB before, ` +
        `peak ${(afterUpload.hwm / MIB).toFixed(1)} MiB after the upload, ${(end.hwm / MIB).toFixed(1)} MiB after reading it back`,
    );
    // Holding the body once would alone be 20 MiB over the start. (Under ASan, RSS says nothing
    // of the program: its quarantine keeps up to 256 MiB of freed memory resident.)
    if (!SANITIZE) {
      assert.ok(grew < 16 * MIB, `peak RSS grew by ${(grew / MIB).toFixed(1)} MiB`);
    }
    const logged = gw.logs.find((l) => l.msg === 'file uploaded' && l.file === uploaded.id);
    assert.equal(logged?.lines, 100000);
    assert.equal(logged?.streamed, true);
  });

  test('over batch.max_file_bytes: a 413 in OpenAI shape, from the head or midway', async () => {
    // Declared length over the limit: refused from the head, with no body byte sent.
    const early = await rawConnect(gw.publicUrl);
    await early.write(uploadHead(gw, { length: 33 * MIB }));
    const refused = await early.waitFor((t) => t.includes('}}'), { timeoutMs: 10000, what: 'the 413 from the head' });
    assert.match(refused, /^HTTP\/1\.1 413 /, refused);
    const refusedBody = JSON.parse(refused.slice(refused.indexOf('\r\n\r\n') + 4));
    assert.equal(refusedBody.error.type, 'invalid_request_error');
    assert.match(refusedBody.error.message, /batch\.max_file_bytes/);
    early.socket.destroy();
    // Declared length within the body's limit (the file's and 64 KiB for the framing), the file
    // part 1 byte over and another field after it: refused while streaming, before the body's
    // end, so the connection closes after the answer (once the rest is read and dropped).
    const client = await rawConnect(gw.publicUrl);
    const data = Buffer.alloc(32 * MIB + 1, 'b');
    const pad = `\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="pad"\r\n\r\n${'p'.repeat(60000)}`;
    const length = Buffer.byteLength(PART_HEAD) + data.length + Buffer.byteLength(pad) + Buffer.byteLength(TAIL);
    await client.write(uploadHead(gw, { length }) + PART_HEAD);
    client.write(data);
    client.write(pad + TAIL);
    const text = await client.waitFor((t) => t.includes('\r\n\r\n') && t.includes('}}'), { timeoutMs: 60000, what: 'the 413' });
    assert.match(text, /^HTTP\/1\.1 413 /);
    assert.match(text, /connection: close/i);
    await client.closed;
    const body = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
    assert.equal(body.error.code, 'file_too_large');
    assert.equal(body.error.param, 'file');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /batch\.max_file_bytes \(33554432 bytes\)/);
    // Refused before the answer: nothing of it is left.
    assert.equal(sql(db, `select count(*) from files where state = ${UPLOADING}`), '0');
    assert.equal(sql(db, 'select count(*) from file_chunks where file_id not in (select id from files)'), '0');
  });

  test('over batch.max_file_lines: a 413', async () => {
    const res = await uploadFetch(gw, 'x\n'.repeat(200001));
    assert.equal(res.status, 413, res.text);
    const e = openAiError(res);
    assert.equal(e.code, 'file_too_large');
    assert.match(e.message, /batch\.max_file_lines \(200000\)/);
    const ok = await uploadFetch(gw, 'x\n'.repeat(200000));
    assert.equal(ok.status, 200, ok.text);
  });

  test('an unauthenticated upload is refused from its head, before its body', async () => {
    for (const expect of [false, true]) {
      const client = await rawConnect(gw.publicUrl);
      // Announces 100 MiB and sends none of it.
      await client.write(uploadHead(gw, { key: 'sk-wrong', length: 100 * MIB, expect }));
      const text = await client.waitFor((t) => t.includes('}}'), { timeoutMs: 10000, what: 'the 401' });
      assert.match(text, /^HTTP\/1\.1 401 /, text);
      assert.doesNotMatch(text, /100 Continue/);
      client.socket.destroy();
    }
  });

  test('a client leaving mid-upload leaves no file record and no chunk', async () => {
    const before = sql(db, 'select count(*) from files');
    const client = await startUnfinishedUpload(gw, db, 'c');
    client.socket.destroy();
    await eventually(() => gw.logs.some((l) => l.msg === 'upload ended before its body did'), { timeoutMs: 20000, what: 'the upload ended' });
    assert.equal(sql(db, `select count(*) from files where state = ${UPLOADING}`), '0');
    assert.equal(sql(db, 'select count(*) from files'), before);
    assert.equal(sql(db, 'select count(*) from file_chunks where file_id not in (select id from files)'), '0');
    // The gateway still serves uploads.
    const ok = await uploadFetch(gw, '{"a":1}\n');
    assert.equal(ok.status, 200, ok.text);
  });
});

describe('a gateway killed mid-upload', () => {
  test('the next start removes the unfinished upload and its chunks', async (t) => {
    const dir = makeTempDir('fleetgate-upload-kill-');
    t.after(() => removeDir(dir));
    const db = path.join(dir, 'batch.db');
    const config = {
      server: { api_keys_env: 'FG_IT_UPLOAD_KEYS' },
      models: [{ name: MODEL, local: { count: 1, engine: 'sim', profile: 'fast-test', time_scale: 20, slots: 1 } }],
      health: { interval: '300ms', timeout: '200ms' },
      storage: { path: db },
    };
    const options = { env: { FLEETGATE_AGENT_BIN: AGENT_BIN, FG_IT_UPLOAD_KEYS: KEY }, timeoutMs: 15000 };
    const first = await startGateway(config, options);
    t.after(() => first.kill());
    const client = await startUnfinishedUpload(first, db, 'k');
    await first.kill(); // SIGKILL: no chance to clean up
    client.socket.destroy();
    assert.equal(sql(db, `select count(*) from files where state = ${UPLOADING}`), '1', 'the dead gateway left its upload');

    const second = await startGateway(config, options);
    t.after(() => stopChecked(second));
    await eventually(() => sql(db, `select count(*) from files where state = ${UPLOADING}`) === '0', {
      timeoutMs: 10000,
      what: 'the unfinished upload removed at start',
    });
    assert.equal(sql(db, 'select count(*) from file_chunks'), '0', 'and its chunks');
    assert.ok(second.logs.some((l) => l.msg === 'removed uploads a previous run left unfinished' && l.files === 1));
    const ok = await uploadFetch(second, '{"a":1}\n');
    assert.equal(ok.status, 200, ok.text);
  });
});
