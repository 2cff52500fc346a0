// `fleetgate batch` (orchestrator/cli/batch_*) against a small fake of the Files and Batches API:
// what each command sends (the upload's exact bytes, the batch's fields, the key), what it prints
// (ids, the status, the list, the live progress bar) and every exit code (docs/batch.md, "The
// CLI"). The CLI against the real gateway is in batch_postgres.test.mjs.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { FLEETGATE_BIN, makeTempDir, removeDir } from './lib/gateway.mjs';
import { closedPortUrl } from './lib/fake_replica.mjs';

const KEY = 'sk-cli-test';

// Runs `fleetgate batch ...args`; resolves with {code, stdout, stderr}.
function batch(args, { env = {}, timeout = 20000 } = {}) {
  const e = { ...process.env, ...env };
  for (const k of ['FLEETGATE_URL', 'FLEETGATE_API_KEY']) {
    if (!(k in env)) {
      delete e[k];
    }
  }
  return new Promise((resolve) => {
    execFile(FLEETGATE_BIN, ['batch', ...args], { env: e, timeout, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

// The fake API: files and batches in memory; each GET of a running batch advances it by `step`
// lines, so --wait sees progress. `failNext` makes the next batch end failed.
function startFakeApi() {
  const state = { files: new Map(), batches: new Map(), requests: [], seq: 0, step: 3, failNext: false };
  const send = (res, status, body) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  };
  const notFound = (res, what) => send(res, 404, { error: { message: `No such ${what}`, type: 'invalid_request_error' } });
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const url = new URL(req.url, 'http://x');
      state.requests.push({ method: req.method, path: url.pathname, search: url.search, headers: req.headers, body });
      if (req.headers.authorization !== `Bearer ${KEY}`) {
        return send(res, 401, { error: { message: 'Incorrect API key provided', type: 'invalid_request_error' } });
      }
      const parts = url.pathname.split('/').filter(Boolean); // v1, files|batches, id, action
      if (req.method === 'POST' && url.pathname === '/v1/files') {
        const boundary = /boundary=(.+)$/.exec(req.headers['content-type'] ?? '')?.[1];
        const text = body.toString('latin1');
        const fields = {};
        let content = null;
        let filename = null;
        for (const part of text.split(`--${boundary}`).slice(1, -1)) {
          const [head, ...rest] = part.split('\r\n\r\n');
          const value = rest.join('\r\n\r\n').replace(/\r\n$/, '');
          const name = /name="([^"]+)"/.exec(head)?.[1];
          if (name === 'file') {
            content = Buffer.from(value, 'latin1');
            filename = /filename="([^"]+)"/.exec(head)?.[1];
          } else {
            fields[name] = value;
          }
        }
        if (fields.purpose !== 'batch' || !content) {
          return send(res, 400, { error: { message: 'purpose and file are required' } });
        }
        const id = `file-${++state.seq}`;
        state.files.set(id, { id, filename, content, bytes: content.length });
        return send(res, 200, { id, object: 'file', bytes: content.length, filename, purpose: 'batch', created_at: 1796320800 });
      }
      if (parts[1] === 'files' && req.method === 'GET' && parts[3] === 'content') {
        const f = state.files.get(parts[2]);
        if (!f) {
          return notFound(res, 'file');
        }
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': f.content.length });
        return res.end(f.content);
      }
      if (req.method === 'POST' && url.pathname === '/v1/batches') {
        const j = JSON.parse(body.toString());
        const file = state.files.get(j.input_file_id);
        if (!file) {
          return notFound(res, 'file');
        }
        const total = file.content.toString().split('\n').filter(Boolean).length;
        const id = `batch_${++state.seq}`;
        const b = {
          id, object: 'batch', endpoint: j.endpoint, input_file_id: j.input_file_id, completion_window: j.completion_window,
          metadata: j.metadata ?? null, status: 'validating', output_file_id: null, error_file_id: null, errors: null,
          created_at: 1796320800, expires_at: 1796407200, request_counts: { total, completed: 0, failed: 0 },
          fail: state.failNext,
        };
        state.failNext = false;
        state.batches.set(id, b);
        const { fail, ...shown } = b;
        return send(res, 200, shown);
      }
      if (req.method === 'GET' && url.pathname === '/v1/batches') {
        const all = [...state.batches.values()].reverse().map(({ fail, ...b }) => b);
        const limit = Number(url.searchParams.get('limit') ?? 20);
        return send(res, 200, { object: 'list', data: all.slice(0, limit), has_more: all.length > limit, first_id: all[0]?.id ?? null, last_id: all[Math.min(limit, all.length) - 1]?.id ?? null });
      }
      if (parts[1] === 'batches' && parts[2]) {
        const b = state.batches.get(parts[2]);
        if (!b) {
          return notFound(res, 'batch');
        }
        if (req.method === 'POST' && parts[3] === 'cancel') {
          b.status = 'cancelling';
        } else if (req.method === 'GET') {
          if (b.status === 'validating') {
            b.status = 'in_progress';
          } else if (b.status === 'in_progress') {
            const c = b.request_counts;
            if (b.fail) {
              b.status = 'failed';
              b.errors = { object: 'list', data: [{ code: 'invalid_json', message: 'Line is not JSON', line: 1 }] };
            } else {
              c.completed = Math.min(c.total - 1, c.completed + state.step);
              if (c.completed + c.failed >= c.total - 1) {
                c.failed = c.total - c.completed;
                b.status = 'completed';
                const out = `file-${++state.seq}`;
                state.files.set(out, { id: out, content: Buffer.from('{"custom_id":"a"}\n'.repeat(c.completed)) });
                b.output_file_id = out;
              }
            }
          } else if (b.status === 'cancelling') {
            b.status = 'cancelled';
          }
        }
        const { fail, ...shown } = b;
        return send(res, 200, shown);
      }
      return notFound(res, 'route');
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ server, state, url: `http://127.0.0.1:${server.address().port}` }));
  });
}

describe('fleetgate batch against a fake API', () => {
  let api;
  let dir;
  let input;
  const lines = Array.from({ length: 10 }, (_, i) =>
    JSON.stringify({ custom_id: `r${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: 'm', messages: [{ role: 'user', content: `é ${i}\u0000` }] } }));

  before(async () => {
    api = await startFakeApi();
    dir = makeTempDir('fleetgate-batch-cli-');
    input = path.join(dir, 'in "q".jsonl');
    fs.writeFileSync(input, `${lines.join('\n')}\n`);
  });

  after(() => {
    api?.server.close();
    removeDir(dir);
  });

  test('submit --wait uploads the exact bytes, creates the batch and draws progress to the end', async () => {
    const r = await batch(['submit', input, '--wait', '--poll-interval', '50ms', '--metadata', 'run=nightly', '--endpoint', '/v1/chat/completions'], {
      env: { FLEETGATE_URL: api.url, FLEETGATE_API_KEY: KEY },
    });
    assert.equal(r.code, 0, r.stderr);
    const id = r.stdout.trim();
    assert.match(id, /^batch_\d+$/);
    const upload = api.state.requests.find((q) => q.method === 'POST' && q.path === '/v1/files');
    assert.match(upload.headers['content-type'], /^multipart\/form-data; boundary=/);
    assert.equal(Number(upload.headers['content-length']), upload.body.length);
    const stored = [...api.state.files.values()][0];
    assert.deepEqual(stored.content, fs.readFileSync(input));
    assert.equal(stored.filename, 'in _q_.jsonl');
    const create = JSON.parse(api.state.requests.find((q) => q.method === 'POST' && q.path === '/v1/batches').body);
    assert.deepEqual(create, { input_file_id: stored.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { run: 'nightly' } });
    // Not a terminal: a line per change (at most every 5 s) and the last one.
    const progress = r.stderr.split('\n').filter((l) => l.startsWith('['));
    assert.ok(progress.length >= 2, r.stderr);
    assert.match(progress.at(-1), /^\[#{30}\]  10\/10  100\.0%  \d+\.\d lines\/s  ETA 0:00  completed  1 failed$/);
    assert.match(r.stderr, new RegExp(`batch ${id} completed: 9 succeeded, 1 failed of 10`));
  });

  test('status, status --json, list and cancel', async () => {
    const flags = ['--url', api.url, '--api-key', KEY];
    const id = [...api.state.batches.keys()][0];
    let r = await batch(['status', id, ...flags]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^id: +${id}\nstatus: +completed\n`));
    assert.match(r.stdout, /requests: +10\/10 done, 1 failed\n/);
    r = await batch(['status', id, '--json', ...flags]);
    assert.equal(JSON.parse(r.stdout).id, id);

    const sub = await batch(['submit', input, ...flags]);
    assert.equal(sub.code, 0, sub.stderr);
    const second = sub.stdout.trim();
    r = await batch(['list', ...flags]);
    assert.equal(r.code, 0, r.stderr);
    const rows = r.stdout.trim().split('\n');
    assert.match(rows[0], /^ID +STATUS +DONE +FAILED +CREATED +ENDPOINT$/);
    assert.match(rows[1], new RegExp(`^${second} +validating +0/10 +0 `));
    assert.match(rows[2], new RegExp(`^${id} +completed +10/10 +1 `));
    r = await batch(['list', '--limit', '1', ...flags]);
    assert.match(r.stdout, new RegExp(`\\(more: --after ${second}\\)`));
    assert.equal(api.state.requests.at(-1).search, '?limit=1');

    r = await batch(['cancel', second, ...flags]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), `${second} cancelling`);
    // wait on a cancelled batch: it ended, not completed.
    r = await batch(['wait', second, '--poll-interval', '20ms', ...flags]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /cancelled/);
  });

  test('download to a file and to stdout; --errors when there is none', async () => {
    const flags = ['--url', api.url, '--api-key', KEY];
    const id = [...api.state.batches.keys()][0];
    const out = path.join(dir, 'out.jsonl');
    let r = await batch(['download', id, '--out', out, ...flags]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(fs.readFileSync(out, 'utf8'), '{"custom_id":"a"}\n'.repeat(9));
    assert.ok(!fs.existsSync(`${out}.part`));
    assert.match(r.stderr, /wrote 162 bytes of file-\d+ to /);
    r = await batch(['download', api.state.batches.get(id).output_file_id, ...flags]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '{"custom_id":"a"}\n'.repeat(9));
    r = await batch(['download', id, '--errors', ...flags]);
    assert.equal(r.code, 5);
    assert.match(r.stderr, /has no error file \(no line failed\)/);
  });

  test('a batch that fails: --wait exits 1 and status names the line', async () => {
    api.state.failNext = true;
    const flags = ['--url', api.url, '--api-key', KEY];
    const r = await batch(['submit', input, '--wait', '--poll-interval', '20ms', ...flags]);
    assert.equal(r.code, 1, r.stderr);
    const s = await batch(['status', r.stdout.trim(), ...flags]);
    assert.match(s.stdout, /errors:\n  line 1: invalid_json: Line is not JSON\n/);
  });

  test('exit codes: usage 2, cannot connect 3, unauthorized 4, refused 5, local file 6', async () => {
    let r = await batch(['submit']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /submit takes one JSONL file\nusage: fleetgate batch/);
    r = await batch(['list', '--url', 'ftp://x']);
    assert.equal(r.code, 2);
    r = await batch(['list', '--url', await closedPortUrl(), '--api-key', KEY]);
    assert.equal(r.code, 3);
    assert.match(r.stderr, /cannot reach http:\/\/127\.0\.0\.1:\d+: Connection refused/);
    r = await batch(['list', '--url', api.url, '--api-key', 'wrong']);
    assert.equal(r.code, 4);
    assert.match(r.stderr, /refused the API key \(HTTP 401: Incorrect API key provided\); pass --api-key or set FLEETGATE_API_KEY/);
    assert.ok(!r.stderr.includes('wrong'), 'the key is not printed');
    // submit asks with a small request first: a wrong key never starts the upload.
    const uploads = api.state.requests.filter((q) => q.path === '/v1/files').length;
    r = await batch(['submit', input, '--url', api.url, '--api-key', 'wrong']);
    assert.equal(r.code, 4, r.stderr);
    assert.equal(api.state.requests.filter((q) => q.path === '/v1/files').length, uploads);
    r = await batch(['status', 'batch_nope', '--url', api.url, '--api-key', KEY]);
    assert.equal(r.code, 5);
    assert.match(r.stderr, /\/v1\/batches\/batch_nope: HTTP 404: No such batch/);
    r = await batch(['submit', path.join(dir, 'missing.jsonl'), '--url', api.url, '--api-key', KEY]);
    assert.equal(r.code, 6);
    assert.match(r.stderr, /cannot read .*missing\.jsonl/);
    r = await batch(['download', [...api.state.batches.keys()][0], '--out', path.join(dir, 'no', 'such', 'dir.jsonl'), '--url', api.url, '--api-key', KEY]);
    assert.equal(r.code, 6);
  });
});
