// `fleetgate status`: its tables and exit codes against a real gateway over simulated phones
// (fleetgate-agent) on 127.0.0.1, and its answers when it cannot connect or is refused.
// docs/operations.md lists the exit codes.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';

import { FLEETGATE_BIN, eventually, startGateway, stopChecked } from './lib/gateway.mjs';
import { freePort, startAgent, stopAgent } from './lib/agent.mjs';
import { ADMIN_TOKEN, FAST_HEALTH, TOKEN_ENV, replicas } from './lib/lifecycle_util.mjs';

const MODEL = 'qwen3.5-9b-fraud';
const CLEAR = '\x1b[H\x1b[2J';

// Runs `fleetgate status ...args`; resolves with {code, stdout, stderr}.
function status(args, { token } = {}) {
  const env = { ...process.env };
  delete env.FLEETGATE_ADMIN_TOKEN;
  if (token !== undefined) {
    env.FLEETGATE_ADMIN_TOKEN = token;
  }
  return new Promise((resolve) => {
    execFile(FLEETGATE_BIN, ['status', ...args], { env, timeout: 15000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

async function startPhone() {
  const port = await freePort();
  const agent = await startAgent(['--listen', `127.0.0.1:${port}`, '--model', MODEL, '--profile', 'fast-test']);
  return { agent, url: `http://127.0.0.1:${port}` };
}

describe('fleetgate status', () => {
  let gw;
  const phones = [];

  before(async () => {
    phones.push(await startPhone(), await startPhone());
    gw = await startGateway({
      admin: { token_env: 'FG_IT_ADMIN_TOKEN' },
      health: FAST_HEALTH,
      models: [{ name: MODEL, endpoints: phones.map((p) => ({ url: p.url })) }],
    }, { env: TOKEN_ENV });
    await eventually(async () => (await replicas(gw)).every((r) => r.state === 'healthy'), {
      timeoutMs: 8000, what: 'both phones healthy',
    });
  });

  after(async () => {
    for (const p of phones) {
      stopAgent(p.agent);
    }
    await stopChecked(gw);
  });

  test('exit 0 and the tables when every model has its healthy replicas (token from the environment)', async () => {
    const r = await status(['--admin', gw.adminUrl], { token: ADMIN_TOKEN });
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split('\n');
    assert.match(lines[0], /^fleetgate \S+ at \S+: ok$/);
    const modelHead = lines.findIndex((l) => l.startsWith('MODEL'));
    assert.match(lines[modelHead + 1], new RegExp(`^${MODEL}\\s+ok\\s+2/2\\s+2\\s+0/2\\s+0\\s`));
    const phoneHead = lines.findIndex((l) => l.startsWith('PHONE'));
    const rows = lines.slice(phoneHead + 1).filter((l) => l.trim());
    assert.equal(rows.length, 2);
    for (const p of phones) {
      assert.ok(rows.some((l) => /\shealthy\s/.test(l) && l.includes(p.url)), r.stdout);
    }
  });

  test('exit 4 without the token or with a wrong one; --token wins over the environment', async () => {
    const none = await status(['--admin', gw.adminUrl]);
    assert.equal(none.code, 4, none.stdout + none.stderr);
    assert.match(none.stderr, /refused the admin token/);
    assert.equal(none.stdout, '');
    const wrong = await status(['--admin', gw.adminUrl, '--token', 'nope'], { token: ADMIN_TOKEN });
    assert.equal(wrong.code, 4, wrong.stderr);
    const right = await status(['--admin', gw.adminUrl, '--token', ADMIN_TOKEN], { token: 'nope' });
    assert.equal(right.code, 0, right.stderr);
  });

  test('exit 3 when nothing listens, or when the URL is not a fleetgate admin listener', async () => {
    const port = await freePort();
    const r = await status(['--admin', `http://127.0.0.1:${port}`], { token: ADMIN_TOKEN });
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stderr, /cannot reach/);
    // A phone's agent answers, but not with the status JSON.
    const other = await status(['--admin', phones[0].url], { token: ADMIN_TOKEN });
    assert.equal(other.code, 3, other.stderr);
  });

  test('exit 2 on bad arguments', async () => {
    assert.equal((await status(['--frobnicate'])).code, 2);
    assert.equal((await status(['--admin', 'ftp://x'])).code, 2);
  });

  test('--watch redraws, shows a killed phone turn unhealthy; then exit 1, degraded', async () => {
    const env = { ...process.env, FLEETGATE_ADMIN_TOKEN: ADMIN_TOKEN };
    const watch = spawn(FLEETGATE_BIN, ['status', '--admin', gw.adminUrl, '--watch'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    watch.stdout.setEncoding('utf8');
    watch.stdout.on('data', (t) => { out += t; });
    const exited = new Promise((resolve) => watch.on('exit', resolve));
    try {
      await eventually(() => out.split(CLEAR).length > 2, { timeoutMs: 5000, what: 'two redraws' });
      const victim = phones[1];
      process.kill(victim.agent.proc.pid, 'SIGKILL');
      await victim.agent.exited;
      const lastFrame = () => out.slice(out.lastIndexOf(CLEAR));
      await eventually(() => lastFrame().split('\n').some((l) => l.includes(victim.url) && /\sunhealthy\s/.test(l)), {
        timeoutMs: 10000, what: 'the watch showing the killed phone unhealthy',
      });
      assert.match(lastFrame(), new RegExp(`${MODEL}\\s+DEGRADED\\s+1/2`));
    } finally {
      process.kill(watch.pid, 'SIGTERM');
      await exited;
    }
    const r = await status(['--admin', gw.adminUrl], { token: ADMIN_TOKEN });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.match(r.stdout.split('\n')[0], /: DEGRADED$/);
  });
});
