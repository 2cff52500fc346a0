// fleetgate-agent configured by a YAML file (--config, --check, flags overriding keys), its
// Prometheus /metrics, the HTTPS listener (tls.cert/tls.key) and the bearer key on the OpenAI
// routes (api_key_env).
//
// Binary: $FLEETGATE_AGENT_BIN, default build/bin/fleetgate-agent (relative to the repository).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { REPO_ROOT, makeTempDir, makeTestCerts, metricValue, removeDir, request } from './lib/gateway.mjs';
import { startAgent, stopAgent } from './lib/agent.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN ?? path.join(REPO_ROOT, 'build/bin/fleetgate-agent');
const MODEL = 'qwen3.5-test';

const chat = (content) => ({ model: MODEL, messages: [{ role: 'user', content }] });

function runAgent(args, env = {}) {
  return spawnSync(AGENT_BIN, args, { encoding: 'utf8', timeout: 10000, env: { ...process.env, ...env } });
}

describe('YAML configuration', () => {
  let dir;
  before(() => {
    dir = makeTempDir('fleetgate-agent-cfg-');
  });
  after(() => removeDir(dir));

  const write = (name, text) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };

  test('--check: 0 for a valid file, 1 naming file:line: key for an invalid one', () => {
    const good = write('good.yaml', [
      'listen: 127.0.0.1:0',
      `model: ${MODEL}`,
      'engine: {kind: sim, profile: qwen3.5-0.8b/snapdragon-8-elite, time_scale: 10}',
      'public_url: http://127.0.0.1:7101',
      'gateway: {url: "http://127.0.0.1:9090", token_env: FLEETGATE_AGENT_TOKEN}',
      'tls: {cert: "", key: ""}',
      'api_key_env: ""',
      'log: {level: warn}',
      'drain_timeout: 5s',
      '',
    ].join('\n'));
    const ok = runAgent(['--config', good, '--check']);
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /is valid/);

    const cases = [
      ['unknown key', `model: m\nslot: 2\n`, /:2: slot: unknown key; did you mean 'slots'\?/],
      ['bad profile', `model: m\nengine:\n  profile: pixel-9\n`, /:3: engine\.profile: unknown simulator profile/],
      ['sim with a url', `model: m\nengine:\n  url: http://127.0.0.1:8080\n`, /:3: engine\.url: only for the llama-server and openai engines/],
      ['no model', `slots: 1\n`, /:1: model: missing/],
      ['gateway without public_url', `model: m\ngateway:\n  url: http://g:1\n  token_env: T\n`, /:3: gateway\.url: needs public_url/],
    ];
    for (const [what, yaml, pattern] of cases) {
      const file = write(`bad-${what.replaceAll(' ', '-')}.yaml`, yaml);
      const r = runAgent(['--config', file, '--check']);
      assert.equal(r.status, 1, `${what}: ${r.stdout}${r.stderr}`);
      assert.ok(r.stderr.includes(file), `${what}: names the file: ${r.stderr}`);
      assert.match(r.stderr, pattern, what);
    }
    // Without --check a bad file also exits 1 (and never starts).
    const bad = runAgent(['--config', write('bad.yaml', 'model: m\nslots: 0\n')]);
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /bad\.yaml:2: slots: must be between 1 and 256/);
  });

  test('the file configures the agent; flags override its keys', async () => {
    const file = write('agent.yaml', [
      'listen: 127.0.0.1:1', // overridden below
      `model: ${MODEL}`,
      'slots: 1',
      'engine:',
      '  kind: sim',
      '  profile: qwen3.5-0.8b/snapdragon-8-elite',
      '  time_scale: 10',
      'drain_timeout: 2s',
      '',
    ].join('\n'));
    const agent = await startAgent(['--config', file, '--listen', '127.0.0.1:0', '--slots', '3']);
    try {
      assert.equal(agent.line.profile, 'qwen3.5-0.8b/snapdragon-8-elite');
      assert.equal(agent.line.time_scale, 10);
      assert.equal(agent.line.slots, 3, 'the flag wins over the file');
      const h = (await request(`${agent.base}/health`)).json;
      assert.equal(h.status, 'ok');
      assert.equal(h.slots_total, 3);
      assert.equal(h.time_scale, 10);
    } finally {
      stopAgent(agent);
    }
  });
});

describe('GET /metrics', () => {
  let agent;
  before(async () => {
    agent = await startAgent(['--listen', '127.0.0.1:0', '--model', MODEL, '--slots', '2']);
  });
  after(() => stopAgent(agent));

  test('requests, tokens, slots and speeds in Prometheus text format', async () => {
    const first = await request(`${agent.base}/metrics`);
    assert.equal(first.status, 200);
    assert.match(first.headers['content-type'], /^text\/plain; version=0\.0\.4/);
    assert.equal(metricValue(first.text, 'fleetgate_agent_slots'), 2);
    assert.equal(metricValue(first.text, 'fleetgate_agent_busy_slots'), 0);
    assert.equal(metricValue(first.text, 'fleetgate_agent_tokens_total', { kind: 'prompt' }), 0);
    assert.ok(/fleetgate_agent_build_info\{version="\d+\.\d+\.\d+"\} 1/.test(first.text));

    const content = 'x'.repeat(400); // 100 prompt tokens
    const ok = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat(content) });
    assert.equal(ok.status, 200);
    const bad = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: { model: 'other', messages: [] } });
    assert.equal(bad.status, 404);

    const text = (await request(`${agent.base}/metrics`)).text;
    assert.equal(metricValue(text, 'fleetgate_agent_requests_total', { status: '200' }), 1);
    assert.equal(metricValue(text, 'fleetgate_agent_requests_total', { status: '404' }), 1);
    assert.equal(metricValue(text, 'fleetgate_agent_tokens_total', { kind: 'prompt' }), ok.json.usage.prompt_tokens);
    assert.equal(metricValue(text, 'fleetgate_agent_tokens_total', { kind: 'completion' }), ok.json.usage.completion_tokens);
    const prefill = metricValue(text, 'fleetgate_agent_prefill_tokens_per_second');
    const decode = metricValue(text, 'fleetgate_agent_decode_tokens_per_second');
    assert.ok(Math.abs(prefill - ok.json.timings.prompt_per_second) < 1, `prefill ${prefill}`);
    assert.ok(Math.abs(decode - ok.json.timings.predicted_per_second) < 1, `decode ${decode}`);
    // No model or replica labels: Prometheus adds them from service discovery.
    assert.ok(!/model=|replica=/.test(text), 'no model/replica labels');

    const promtool = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (promtool.error?.code === 'ENOENT') {
      return; // promtool not installed here
    }
    assert.equal(promtool.status, 0, `promtool check metrics:\n${promtool.stdout}${promtool.stderr}`);
  });
});

describe('HTTPS listener and API key', () => {
  let dir;
  let certs;
  let agent;
  const KEY = 'phone-key-7c1e';
  before(async () => {
    dir = makeTempDir('fleetgate-agent-tls-');
    certs = makeTestCerts(dir);
    agent = await startAgent(
      ['--listen', '127.0.0.1:0', '--model', MODEL, '--tls-cert', certs.certFile, '--tls-key', certs.keyFile,
        '--api-key-env', 'FG_IT_PHONE_KEY'],
      { env: { FG_IT_PHONE_KEY: KEY }, scheme: 'https' },
    );
  });
  after(() => {
    stopAgent(agent);
    removeDir(dir);
  });

  test('serves HTTPS with the configured certificate', async () => {
    assert.equal(agent.line.tls, true);
    const h = await request(`${agent.base}/health`, { ca: certs.ca });
    assert.equal(h.status, 200);
    assert.equal(h.json.status, 'ok');
    // A client that does not trust the CA is refused by its own verification.
    await assert.rejects(request(`${agent.base}/health`, { ca: certs.otherCa }));
  });

  test('the OpenAI routes need the bearer key; /health and /metrics stay open', async () => {
    const url = `${agent.base}/v1/chat/completions`;
    const none = await request(url, { method: 'POST', body: chat('hi'), ca: certs.ca });
    assert.equal(none.status, 401);
    assert.equal(none.json.error.code, 'invalid_api_key');
    assert.equal(none.headers['www-authenticate'], 'Bearer');
    const wrong = await request(url, { method: 'POST', body: chat('hi'), ca: certs.ca, headers: { Authorization: `Bearer ${KEY}x` } });
    assert.equal(wrong.status, 401);
    const models = await request(`${agent.base}/v1/models`, { ca: certs.ca });
    assert.equal(models.status, 401, '/v1/models is an OpenAI route too');
    const ok = await request(url, { method: 'POST', body: chat('hi'), ca: certs.ca, headers: { Authorization: `Bearer ${KEY}` } });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.object, 'chat.completion');
    assert.equal((await request(`${agent.base}/health`, { ca: certs.ca })).status, 200);
    assert.equal((await request(`${agent.base}/metrics`, { ca: certs.ca })).status, 200);
  });

  test('a key variable that is not set stops the start with a message naming it', () => {
    const env = { ...process.env };
    delete env.FG_IT_NO_SUCH_KEY;
    const r = spawnSync(AGENT_BIN, ['--listen', '127.0.0.1:0', '--model', MODEL, '--api-key-env', 'FG_IT_NO_SUCH_KEY'],
      { encoding: 'utf8', timeout: 5000, env });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /api_key_env: the environment variable FG_IT_NO_SUCH_KEY is not set/);
  });
});
