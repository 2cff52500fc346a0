// Two gateways on one PostgreSQL (storage.backend postgres; docs/batch.md, docs/architecture.md
// "More than one gateway"): a batch submitted to one with `fleetgate batch submit` is worked
// through by both (their leases seen in the database), one is SIGKILLed midway, and the other
// finishes it: every custom_id exactly once in the output, the dead gateway's leased lines run
// again after their lease expired. The real PostgreSQL 15 is started by the test
// (tests/postgres/pg_server.sh) and stopped by PID; skipped, with the reason, only when its
// binaries are missing.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { FLEETGATE_BIN, eventually, makeTempDir, removeDir, startGateway, stopChecked } from './lib/gateway.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import { postgresSkipReason, startPostgres } from './lib/postgres.mjs';

const MODEL = 'fraud-review';
const KEY = 'sk-pg-test';
const LINES = 400;

function cli(args, { timeout = 60000 } = {}) {
  const env = { ...process.env };
  delete env.FLEETGATE_URL;
  delete env.FLEETGATE_API_KEY;
  return new Promise((resolve) => {
    execFile(FLEETGATE_BIN, ['batch', ...args], { env, timeout, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

const skip = postgresSkipReason();

describe('two gateways on one PostgreSQL', { skip }, () => {
  let pg;
  let phone;
  let dir;
  const gateways = [];

  before(async () => {
    pg = await startPostgres();
    dir = makeTempDir('fleetgate-pg-batch-');
    // One phone with room for both gateways' lines at once; each answer takes 100 ms, so the
    // batch lasts seconds and the kill lands midway.
    phone = await startFakeReplica({ mode: { delayMs: 100 }, servedModels: [MODEL] });
    const config = {
      server: { api_keys_env: 'FG_IT_PG_KEYS' },
      models: [{ name: MODEL, endpoints: [{ url: phone.url, slots: 64 }] }],
      storage: { backend: 'postgres', url_env: 'FG_IT_DATABASE_URL' },
      batch: { poll_interval: '100ms', retry_backoff: '50ms', lease_timeout: '2s', max_in_flight: 8 },
    };
    const env = { FG_IT_PG_KEYS: KEY, FG_IT_DATABASE_URL: pg.url };
    for (let i = 0; i < 2; i++) {
      gateways.push(await startGateway(config, { env, timeoutMs: 20000 }));
    }
  });

  after(async () => {
    await stopChecked(gateways[1]);
    await gateways[0]?.kill();
    await phone?.close();
    await pg?.stop();
    removeDir(dir);
  });

  test('both work through one batch; one SIGKILLed midway; every line ends exactly once', async () => {
    const [a, b] = gateways;
    const input = path.join(dir, 'in.jsonl');
    fs.writeFileSync(
      input,
      Array.from({ length: LINES }, (_, i) =>
        JSON.stringify({ custom_id: `tx-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: `Transaction ${i}: risk?` }] } }),
      ).join('\n') + '\n',
    );
    const submitted = await cli(['submit', input, '--url', a.publicUrl, '--api-key', KEY]);
    assert.equal(submitted.code, 0, submitted.stderr);
    const id = submitted.stdout.trim();
    assert.match(id, /^batch_/);

    // Both gateways have held leases (instance names carry the process id) and some lines are done.
    const owners = new Set();
    await eventually(
      () => {
        for (const owner of pg.psql(`SELECT DISTINCT lease_owner FROM lines WHERE batch_id = '${id}' AND state = 1`).split('\n').filter(Boolean)) {
          owners.add(owner.split('/')[1]);
        }
        const results = Number(pg.psql(`SELECT count(*) FROM results WHERE batch_id = '${id}'`));
        return owners.has(String(a.pid)) && owners.has(String(b.pid)) && results >= 40;
      },
      { timeoutMs: 20000, everyMs: 50, what: 'leases held by both gateways and 40 results' },
    );
    const doneBefore = Number(pg.psql(`SELECT count(*) FROM results WHERE batch_id = '${id}'`));
    assert.ok(doneBefore < LINES, `the batch was over before the kill (${doneBefore})`);

    await a.kill();
    const orphaned = Number(pg.psql(`SELECT count(*) FROM lines WHERE batch_id = '${id}' AND state = 1 AND lease_owner LIKE '%/${a.pid}/%'`));
    console.log(`killed gateway ${a.pid} with ${doneBefore}/${LINES} results and ${orphaned} lines leased`);

    // The survivor finishes; the CLI's wait draws the progress bar against the real gateway.
    const waited = await cli(['wait', id, '--url', b.publicUrl, '--api-key', KEY, '--poll-interval', '200ms']);
    assert.equal(waited.code, 0, waited.stderr);
    assert.match(waited.stderr, new RegExp(`\\[#{30}\\]  ${LINES}/${LINES}  100\\.0%  .* completed`));

    const out = path.join(dir, 'out.jsonl');
    const downloaded = await cli(['download', id, '--out', out, '--url', b.publicUrl, '--api-key', KEY]);
    assert.equal(downloaded.code, 0, downloaded.stderr);
    const results = fs.readFileSync(out, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assert.equal(results.length, LINES);
    const seen = new Map();
    for (const r of results) {
      seen.set(r.custom_id, (seen.get(r.custom_id) ?? 0) + 1);
      assert.equal(r.response.status_code, 200);
    }
    for (let i = 0; i < LINES; i++) {
      assert.equal(seen.get(`tx-${i}`), 1, `tx-${i}`);
    }
    const errors = await cli(['download', id, '--errors', '--url', b.publicUrl, '--api-key', KEY]);
    assert.equal(errors.code, 5, 'no error file');

    assert.equal(Number(pg.psql(`SELECT count(*) FROM results WHERE batch_id = '${id}'`)), LINES);
    // The dead gateway's leased lines ran again on the survivor after their lease expired.
    const rerun = Number(pg.psql(`SELECT count(*) FROM lines WHERE batch_id = '${id}' AND attempts >= 2`));
    assert.ok(rerun >= orphaned, `${rerun} lines ran twice, ${orphaned} were orphaned`);
    // At least once on the phone.
    const calls = phone.requests.filter((r) => r.path === '/v1/chat/completions').length;
    assert.ok(calls >= LINES, `${calls} phone requests`);
    console.log(`phone requests: ${calls} for ${LINES} lines (${rerun} lines run twice)`);
  });
});
