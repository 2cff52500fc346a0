// The Files and Batches API (docs/batch.md) with the official openai npm client, over simulated
// phones the gateway starts itself (fast-test profile, sped up): a 2,000-line batch, each
// validation error, cancel, expiry, interactive requests during a batch, owners kept apart, and a
// gateway killed with SIGKILL midway and started again (nothing lost, nothing doubled). All of it
// twice: on SQLite (the embedded default) and on PostgreSQL (a real server started by
// tests/postgres/pg_server.sh; that half is skipped, with the reason, only when its binaries are
// missing).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { REPO_ROOT, eventually, makeTempDir, removeDir, startGateway, stopChecked } from './lib/gateway.mjs';
import { postgresSkipReason, startPostgres } from './lib/postgres.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN || path.join(REPO_ROOT, 'build', 'bin', 'fleetgate-agent');
const MODEL = 'qwen3.5-0.8b';
const KEY = 'sk-batch-test';
const OTHER_KEY = 'sk-batch-other';

const { default: OpenAI, toFile } = await import('openai');

function config(extra = {}) {
  return {
    server: { api_keys_env: 'FG_IT_BATCH_KEYS' },
    models: [{ name: MODEL, local: { count: 4, engine: 'sim', profile: 'fast-test', time_scale: 20, slots: 4 } }],
    health: { interval: '300ms', timeout: '200ms' },
    batch: { poll_interval: '100ms', retry_backoff: '50ms', ...(extra.batch ?? {}) },
    ...(extra.storage ? { storage: extra.storage } : {}),
  };
}
const BASE_ENV = { FLEETGATE_AGENT_BIN: AGENT_BIN, FG_IT_BATCH_KEYS: `${KEY},${OTHER_KEY}` };
let ENV = BASE_ENV;

function line(i, { maxTokens = 1, model = MODEL, url = '/v1/chat/completions', customId } = {}) {
  return JSON.stringify({
    custom_id: customId ?? `req-${i}`,
    method: 'POST',
    url,
    body: { model, max_tokens: maxTokens, messages: [{ role: 'user', content: `Transaction ${i}: risk?` }] },
  });
}

function jsonl(n, options) {
  return Array.from({ length: n }, (_, i) => line(i, options)).join('\n') + '\n';
}

async function submit(client, text, { window = '24h', name = 'input.jsonl' } = {}) {
  const file = await client.files.create({ file: await toFile(Buffer.from(text), name), purpose: 'batch' });
  return client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: window });
}

async function waitFor(client, id, statuses, timeoutMs = 20000) {
  let batch;
  await eventually(
    async () => {
      batch = await client.batches.retrieve(id);
      return statuses.includes(batch.status);
    },
    { timeoutMs, everyMs: 100, what: `batch ${id} in ${statuses.join('/')}` },
  );
  return batch;
}

async function lines(client, fileId) {
  if (!fileId) {
    return [];
  }
  const res = await client.files.content(fileId);
  const text = await res.text();
  return text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

function client(gw, key = KEY) {
  return new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: key, maxRetries: 0, timeout: 15000 });
}

for (const backend of ['sqlite', 'postgres']) {
  const skip = backend === 'postgres' ? postgresSkipReason() : false;
  // null on SQLite (the default, or the path a test gives); on PostgreSQL a fresh server, the
  // storage section naming it, and ENV carrying its URL.
  async function startBackend() {
    if (backend !== 'postgres') {
      ENV = BASE_ENV;
      return null;
    }
    const server = await startPostgres();
    ENV = { ...BASE_ENV, FG_IT_DATABASE_URL: server.url };
    return { server, storage: { backend: 'postgres', url_env: 'FG_IT_DATABASE_URL' } };
  }

  describe(`Batch API over simulated phones (${backend})`, { skip }, () => {
    let gw;
    let openai;
    let pg;

    before(async () => {
      pg = await startBackend();
      gw = await startGateway(config({ batch: { slots_per_batch: 0 }, storage: pg?.storage }), { env: ENV, timeoutMs: 15000 });
      openai = client(gw);
      await eventually(async () => (await gw.metric('fleetgate_slots', { model: MODEL, state: 'free' })) >= 16, {
        timeoutMs: 15000,
        what: '16 free slots',
      });
    });
    after(async () => {
      await stopChecked(gw);
      await pg?.server.stop();
    });

    test('a 2,000-line batch completes with every custom_id exactly once', async () => {
      const started = Date.now();
      const batch = await submit(openai, jsonl(2000));
      assert.equal(batch.object, 'batch');
      assert.equal(batch.status, 'validating');
      assert.equal(batch.endpoint, '/v1/chat/completions');
      const done = await waitFor(openai, batch.id, ['completed', 'failed'], 60000);
      assert.equal(done.status, 'completed', JSON.stringify(done.errors));
      assert.deepEqual(done.request_counts, { total: 2000, completed: 2000, failed: 0 });
      for (const key of ['in_progress_at', 'finalizing_at', 'completed_at']) {
        assert.ok(done[key] >= done.created_at, key);
      }
      assert.equal(done.error_file_id, null);
      const out = await lines(openai, done.output_file_id);
      assert.equal(out.length, 2000);
      const ids = new Set(out.map((l) => l.custom_id));
      assert.equal(ids.size, 2000);
      for (let i = 0; i < 2000; i++) {
        assert.ok(ids.has(`req-${i}`), `req-${i}`);
      }
      const first = out[0];
      assert.equal(first.response.status_code, 200);
      assert.equal(first.response.body.object, 'chat.completion');
      assert.equal(first.error, null);
      assert.match(first.id, /^batch_req_/);
      const file = await openai.files.retrieve(done.output_file_id);
      assert.equal(file.purpose, 'batch_output');
      const raw = await (await openai.files.content(done.output_file_id)).text();
      assert.equal(file.bytes, Buffer.byteLength(raw));
      console.log(`2,000 lines in ${Date.now() - started} ms`);
      const listed = await openai.batches.list({ limit: 5 });
      assert.ok(listed.data.some((b) => b.id === batch.id));
    });

    test('the input file reads back as uploaded; another key sees none of it', async () => {
      const text = jsonl(3);
      const file = await openai.files.create({ file: await toFile(Buffer.from(text), 'three.jsonl'), purpose: 'batch' });
      assert.equal(file.bytes, Buffer.byteLength(text));
      assert.equal(file.filename, 'three.jsonl');
      assert.equal(await (await openai.files.content(file.id)).text(), text);
      const other = client(gw, OTHER_KEY);
      await assert.rejects(other.files.retrieve(file.id), (e) => e.status === 404);
      const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
      await assert.rejects(other.batches.retrieve(batch.id), (e) => e.status === 404);
      await assert.rejects(other.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }), (e) => e.status === 404);
      assert.ok(!(await other.batches.list()).data.some((b) => b.id === batch.id));
      await waitFor(openai, batch.id, ['completed']);
      const deleted = await openai.files.del?.(file.id) ?? (await openai.files.delete(file.id));
      assert.equal(deleted.deleted, true);
      await assert.rejects(openai.files.retrieve(file.id), (e) => e.status === 404);
    });

    const invalid = [
      ['bad JSON', (good) => good.replace(line(1), '{"custom_id": "req-1", '), 'invalid_json_line', 2],
      ['missing custom_id', (good) => good.replace(line(2), JSON.stringify({ method: 'POST', url: '/v1/chat/completions', body: { model: MODEL } })), 'missing_required_parameter', 3],
      ['duplicate custom_id', (good) => good.replace(line(2), line(2, { customId: 'req-0' })), 'duplicate_custom_id', 3],
      ['wrong url', (good) => good.replace(line(1), line(1, { url: '/v1/embeddings' })), 'invalid_url', 2],
      ['unknown model', (good) => good.replace(line(0), line(0, { model: 'gpt-4o' })), 'model_not_found', 1],
    ];
    for (const [name, mutate, code, lineNo] of invalid) {
      test(`validation: ${name} fails the batch naming line ${lineNo}`, async () => {
        const batch = await submit(openai, mutate(jsonl(3)));
        const failed = await waitFor(openai, batch.id, ['failed', 'in_progress', 'completed']);
        assert.equal(failed.status, 'failed');
        assert.ok(failed.failed_at > 0);
        assert.equal(failed.errors.object, 'list');
        assert.equal(failed.errors.data[0].code, code);
        assert.equal(failed.errors.data[0].line, lineNo);
        assert.equal(failed.request_counts.total, 0);
      });
    }

    test('cancel midway: in-flight lines finish, the rest never run', async () => {
      const batch = await submit(openai, jsonl(2000, { maxTokens: 64 }));
      await eventually(async () => (await openai.batches.retrieve(batch.id)).request_counts.completed >= 10, {
        timeoutMs: 20000,
        everyMs: 50,
        what: 'some lines done',
      });
      const cancelling = await openai.batches.cancel(batch.id);
      assert.ok(['cancelling', 'cancelled'].includes(cancelling.status));
      const cancelled = await waitFor(openai, batch.id, ['cancelled']);
      assert.ok(cancelled.cancelled_at >= cancelled.cancelling_at);
      const out = await lines(openai, cancelled.output_file_id);
      assert.equal(out.length, cancelled.request_counts.completed);
      assert.ok(out.length < 2000, `${out.length} of 2000 ran`);
      assert.equal(new Set(out.map((l) => l.custom_id)).size, out.length);
      await assert.rejects(openai.batches.cancel(batch.id).then((b) => assert.equal(b.status, 'cancelled')).then(() => Promise.reject({ status: 409 })), (e) => e.status === 409);
    });

    test('expiry: lines not run within the completion window end in the error file', async () => {
      const batch = await submit(openai, jsonl(3000, { maxTokens: 128 }), { window: '1s' });
      const expired = await waitFor(openai, batch.id, ['expired', 'completed']);
      assert.equal(expired.status, 'expired');
      const out = await lines(openai, expired.output_file_id);
      const errors = await lines(openai, expired.error_file_id);
      assert.ok(errors.length > 0);
      assert.equal(out.length + errors.length, 3000);
      assert.equal(errors[0].error.code, 'batch_expired');
      assert.equal(errors[0].response, null);
      const ids = new Set([...out, ...errors].map((l) => l.custom_id));
      assert.equal(ids.size, 3000);
    });

    test('interactive requests are served while a batch fills every slot', async () => {
      const batch = await submit(openai, jsonl(3000, { maxTokens: 32 }));
      await waitFor(openai, batch.id, ['in_progress']);
      await eventually(async () => (await openai.batches.retrieve(batch.id)).request_counts.completed >= 50, {
        timeoutMs: 20000,
        what: 'the batch running',
      });
      const times = [];
      for (let i = 0; i < 10; i++) {
        const t0 = Date.now();
        const answer = await openai.chat.completions.create({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
        times.push(Date.now() - t0);
        assert.equal(answer.object, 'chat.completion');
      }
      const progress = await openai.batches.retrieve(batch.id);
      assert.equal(progress.status, 'in_progress', 'the batch was still running');
      times.sort((a, b) => a - b);
      console.log(`interactive during a batch: median ${times[5]} ms, max ${times[9]} ms`);
      assert.ok(times[9] < 5000, `an interactive request waited ${times[9]} ms`);
      await openai.batches.cancel(batch.id);
      await waitFor(openai, batch.id, ['cancelled']);
    });
  });

  describe(`Batch API durability: SIGKILL midway and restart (${backend})`, { skip }, () => {
    let dir;
    let gw;
    let pg;
    after(async () => {
      await stopChecked(gw);
      await pg?.server.stop();
      removeDir(dir);
    });

    test('every input line ends with exactly one output or error line', async () => {
      dir = makeTempDir('fleetgate-batch-db-');
      pg = await startBackend();
      // On PostgreSQL the restarted gateway is another instance and takes the dead one's leased
      // lines only once their leases expire (SQLite releases them at start): a short lease here,
      // or the batch would wait out the 5m default.
      const cfg = config({
        storage: pg ? pg.storage : { path: path.join(dir, 'batch.db') },
        batch: { slots_per_batch: 4, ...(pg ? { lease_timeout: '2s' } : {}) },
      });
      gw = await startGateway(cfg, { env: ENV, timeoutMs: 15000 });
      let openai = client(gw);
      const total = 600;
      const batch = await submit(openai, jsonl(total, { maxTokens: 16 }));
      await eventually(async () => (await openai.batches.retrieve(batch.id)).request_counts.completed >= 50, {
        timeoutMs: 20000,
        everyMs: 50,
        what: 'the batch midway',
      });
      const before = await openai.batches.retrieve(batch.id);
      assert.ok(before.request_counts.completed < total, 'killed midway');
      await gw.kill();
      const killedAt = Date.now();
      if (!pg) {
        assert.ok(fs.existsSync(path.join(dir, 'batch.db')));
      }
      gw = await startGateway(cfg, { env: ENV, timeoutMs: 15000 });
      openai = client(gw);
      await eventually(async () => (await openai.batches.retrieve(batch.id)).request_counts.completed > before.request_counts.completed, {
        timeoutMs: 20000,
        what: 'the batch resumed',
      });
      console.log(`restart to resume: ${Date.now() - killedAt} ms`);
      const done = await waitFor(openai, batch.id, ['completed'], 60000);
      const out = await lines(openai, done.output_file_id);
      const errors = await lines(openai, done.error_file_id);
      assert.equal(out.length + errors.length, total);
      const ids = [...out, ...errors].map((l) => l.custom_id);
      assert.equal(new Set(ids).size, total, 'no line doubled');
      assert.deepEqual(done.request_counts, { total, completed: out.length, failed: errors.length });
    });
  });
}
