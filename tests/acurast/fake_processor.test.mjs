// A rendered Acurast project run by a fake processor (issue 12, item 7; tests/acurast/lib/
// processor.mjs says what is faked and how): `fleetgate deploy acurast` renders the project from
// the gateway's own YAML with the real aarch64 binaries, the fake processor unpacks it and runs
// its start.sh with the binaries under qemu-aarch64-static, a fake bridge and a TLS tunnel front,
// and a real x86 gateway on the same YAML takes the phone's registration, challenges its tunnel
// URL, and routes the official `openai` client to it. The model is the tiny test model
// (scripts/llama/make_tiny_model.py), served by a local HTTP server.
//
// Skipped (one test naming the reason) with FLEETGATE_SKIP_AARCH64=1 or FLEETGATE_SKIP_LLAMA=1,
// or when not root (the gateway's private /etc/hosts and port 443 need it); a missing binary or
// qemu fails the file, as in the aarch64 tests.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';

import { AARCH64_AGENT_BIN, AARCH64_LLAMA_SERVER, aarch64Gate } from '../integration/lib/aarch64.mjs';
import { freePort } from '../integration/lib/agent.mjs';
import { makeTunnelKey, tunnelUrlForKey } from '../integration/lib/fake_bridge.mjs';
import { REPO_ROOT, eventually, makeTempDir, removeDir, startGateway, stopChecked } from '../integration/lib/gateway.mjs';
import { ADMIN_TOKEN, replicas } from '../integration/lib/lifecycle_util.mjs';
import {
  declaredVariables, gatewayPrefix, listFiles, makeHostsFile, makeTunnelCerts, processorSkipReason, renderProject,
  startFileServer, startProcessor,
} from './lib/processor.mjs';

const LLAMA_CACHE = process.env.FLEETGATE_LLAMA_CACHE || path.join(REPO_ROOT, '.cache', 'llama');
const MODEL_FILE = process.env.FLEETGATE_LLAMA_MODEL || path.join(LLAMA_CACHE, 'models', 'tiny-qwen2.gguf');
const MODEL = 'tiny-qwen2';
const AGENT_DIST = path.join(REPO_ROOT, 'build-aarch64', 'dist', 'fleetgate-agent');

// The phones' secrets, as the operator's .env holds them (test values).
const SECRETS = {
  FG_AC_REGISTRATION_TOKEN: 'acurast-registration-token-6f2e91c4d0',
  FG_AC_PHONE_KEY: 'acurast-phone-api-key-b83a7d15e9',
  FLEETGATE_TUNNEL_KEY: makeTunnelKey(),
};

function gate() {
  const skip = aarch64Gate([AARCH64_AGENT_BIN, AARCH64_LLAMA_SERVER], {
    extraSkip: process.env.FLEETGATE_SKIP_LLAMA === '1' ? 'FLEETGATE_SKIP_LLAMA=1' : processorSkipReason(),
  });
  if (skip) {
    return skip;
  }
  const missing = [AGENT_DIST, MODEL_FILE].filter((f) => !fs.existsSync(f));
  if (missing.length > 0) {
    throw new Error(`the fake processor cannot run: ${missing.join(', ')} missing (./fleet build --target aarch64 makes the ` +
      'stripped agent; the aarch64_llama test or scripts/llama/make_tiny_model.py makes the model)');
  }
  return null;
}
const skip = gate();
const suite = skip ? (title) => test(title, { skip }, () => {}) : describe;

const sha256File = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

// The gateway's YAML, which also renders the deployment (deploy.acurast).
function fleetYaml({ adminPort, caFile, modelUrl, sha256, stableUrl }) {
  return [
    'server: {listen: "127.0.0.1:0", drain_timeout: 3s}',
    `admin: {listen: "127.0.0.1:${adminPort}", token_env: FG_AC_ADMIN_TOKEN}`,
    'log: {level: info}',
    'registration:',
    '  token_env: FG_AC_REGISTRATION_TOKEN',
    '  allowed_urls: ["https://*.acu.run"]',
    `upstream: {api_key_env: FG_AC_PHONE_KEY, ca_file: ${JSON.stringify(caFile)}, first_byte_timeout: 120s, idle_timeout: 60s}`,
    'health: {interval: 1s, timeout: 900ms, unhealthy_after: 2, healthy_after: 1, eject_after: 3}',
    'routing: {queue_timeout: 120s}',
    'models:',
    `  - name: ${MODEL}`,
    '    replicas: 1',
    '    slots: 2',
    '    deploy:',
    '      acurast:',
    '        network: mainnet',
    `        gateway_url: "http://127.0.0.1:${adminPort}"`,
    `        model_file: {url: ${JSON.stringify(modelUrl)}, sha256: ${sha256}}`,
    '        max_cost_per_execution: 1000000000000',
    '        context_size: 512',
    `        stable_url: ${stableUrl}`,
    '',
  ].join('\n');
}

suite('a rendered Acurast project on a fake processor, behind a real gateway', () => {
  let OpenAI;
  let dir;
  let certs;
  let hostsFile;
  let models;
  let adminPort;
  let gw;
  let project; // the default render: each phone makes its own tunnel key
  let badProject; // stable_url on, a wrong sha256
  let phone;
  const phones = []; // every processor started, closed in after() whatever failed
  let firstAnswerMs;
  const timeline = {};

  const client = () => new OpenAI({ baseURL: `${gw.publicUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const ask = (c) => c.chat.completions.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'Say hi.' }] });
  const replicaOf = async (url) => (await replicas(gw)).find((r) => r.url === url);

  before(async () => {
    // The npm packages are tests/integration's (package.json, npm ci).
    const require = createRequire(path.join(REPO_ROOT, 'tests', 'integration', 'package.json'));
    OpenAI = (await import(pathToFileURL(require.resolve('openai')).href)).default;
    dir = makeTempDir('fleetgate-acurast-');
    certs = makeTunnelCerts(dir);
    hostsFile = makeHostsFile(dir);
    models = await startFileServer(MODEL_FILE);
    adminPort = await freePort();
    const sha = sha256File(MODEL_FILE);
    const configFile = path.join(dir, 'fleet.yaml');
    const options = { adminPort, caFile: certs.caFile, modelUrl: models.url };
    fs.writeFileSync(configFile, fleetYaml({ ...options, sha256: sha, stableUrl: false }));
    project = renderProject({ configFile, out: path.join(dir, 'out'), model: MODEL, env: SECRETS });
    const badFile = path.join(dir, 'fleet-bad.yaml');
    fs.writeFileSync(badFile, fleetYaml({ ...options, sha256: 'e'.repeat(64), stableUrl: true }));
    badProject = renderProject({ configFile: badFile, out: path.join(dir, 'out-bad'), model: MODEL, env: SECRETS });
    gw = await startGateway(fs.readFileSync(configFile, 'utf8'), {
      prefix: gatewayPrefix(hostsFile),
      env: { ...SECRETS, FG_AC_ADMIN_TOKEN: ADMIN_TOKEN },
    });
  });

  after(async () => {
    for (const p of phones) {
      await p.close();
    }
    await stopChecked(gw);
    await models?.close();
    removeDir(dir);
  });

  test('no rendered file holds a secret, though the CLI ran with every one set', () => {
    assert.deepEqual(declaredVariables(project), ['FG_AC_REGISTRATION_TOKEN', 'FG_AC_PHONE_KEY']);
    assert.deepEqual(declaredVariables(badProject), ['FG_AC_REGISTRATION_TOKEN', 'FG_AC_PHONE_KEY', 'FLEETGATE_TUNNEL_KEY']);
    let files = 0;
    for (const root of [project, badProject]) {
      for (const file of listFiles(root)) {
        const bytes = fs.readFileSync(file); // binaries included
        for (const [name, value] of Object.entries(SECRETS)) {
          assert.ok(!bytes.includes(value), `${path.relative(dir, file)} contains ${name}'s value`);
        }
        files += 1;
      }
    }
    assert.equal(files, 16);
    assert.equal(sha256File(path.join(project, 'app', 'fleetgate-agent')), sha256File(AGENT_DIST), 'the stripped agent was copied');
  });

  test('render, run, register, pass the URL challenge, download and verify the model, serve the openai client', async (t) => {
    phone = await startProcessor({ projectDir: project, root: path.join(dir, 'phone'), values: SECRETS, hostsFile, certs, deploymentId: 'dep-acurast-it-1' });
    phones.push(phone);
    const since = (ms) => ms - phone.startedAt;
    const agent = phone.proc;
    await agent.waitForLog((l) => l.msg === 'model downloaded and verified', { timeoutMs: 60000, what: 'the model downloaded and verified' });
    timeline.verified = since(Date.now());
    assert.ok(models.requests.length >= 1 && models.bytesSent >= fs.statSync(MODEL_FILE).size);
    await agent.waitForLog((l) => l.msg === 'tunnel open', { timeoutMs: 30000, what: 'the tunnel open' });
    assert.match(phone.url, /^https:\/\/[0-9a-f]{8}\.acu\.run$/, 'the URL the network gives for a key');
    // No key was given (stable_url off): the phone made its own, and the URL is that key's.
    const startParams = phone.bridge.calls.find((c) => c.method === 'tunnel_start').params;
    assert.equal(phone.url, tunnelUrlForKey(startParams.primaryKey.bytes));
    assert.notEqual(startParams.primaryKey.bytes, SECRETS.FLEETGATE_TUNNEL_KEY);
    await agent.waitForLog((l) => l.msg === 'engine ready', { timeoutMs: 120000, what: 'llama-server ready' });
    timeline.engineReady = since(Date.now());
    await agent.waitForLog((l) => l.msg === 'registered with the gateway', { timeoutMs: 30000, what: 'registered' });
    timeline.registered = since(Date.now());
    let replica;
    await eventually(async () => (replica = await replicaOf(phone.url))?.state === 'healthy', {
      timeoutMs: 60000, everyMs: 100, what: 'the phone healthy at the gateway (its URL challenge passed)',
    }).catch((e) => {
      e.message += `; last seen ${JSON.stringify(replica)}\n${agent.text.slice(-3000)}`;
      throw e;
    });
    timeline.healthy = since(Date.now());
    assert.equal(replica.registered, true);
    assert.equal(replica.deployment_id, 'dep-acurast-it-1');
    assert.ok(replica.ends_at, 'the deployment end is known');
    // The gateway fetched the challenge through the tunnel's URL (TLS verified against the test
    // CA in upstream.ca_file) before it routed anything there.
    const passed = gw.logs.find((l) => l.msg === 'url challenge passed');
    assert.ok(passed, 'the gateway logged the passed URL challenge');
    assert.ok(passed.url.includes(new URL(phone.url).hostname), passed.url);
    assert.ok(!gw.logs.some((l) => l.msg === 'request' && gw.logs.indexOf(l) < gw.logs.indexOf(passed)), 'no request before the challenge passed');

    const c = client();
    const answer = await ask(c);
    firstAnswerMs = since(Date.now());
    assert.equal(answer.object, 'chat.completion');
    assert.equal(typeof answer.choices[0].message.content, 'string');
    assert.ok(answer.usage.completion_tokens >= 1);
    const stream = await c.chat.completions.create({ model: MODEL, max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'Say hi.' }] });
    let chunks = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      chunks += 1;
    }
    assert.ok(chunks >= 1);
    // The request log line is written once the answer is complete, which may follow the client's
    // last chunk.
    await eventually(() => gw.requestLogs().filter((l) => l.model === MODEL && l.status === 200).length >= 2,
      { timeoutMs: 10000, what: 'both answers in the request log' });
    t.diagnostic(`entry script start -> model verified ${timeline.verified} ms, llama-server ready ${timeline.engineReady} ms, ` +
      `registered ${timeline.registered} ms, healthy at the gateway ${timeline.healthy} ms, first routed answer ${firstAnswerMs} ms`);
  });

  test('a dropped tunnel is healed: the bridge reports it down, the agent opens it again', async () => {
    assert.ok(phone, 'the phone of the previous test runs');
    const starts = phone.bridge.tunnel.starts;
    const url = phone.url;
    phone.bridge.dropTunnel();
    await phone.proc.waitForLog((l) => l.msg === 'tunnel down: opening it again', { timeoutMs: 30000, what: 'the agent noticing the tunnel down' });
    await phone.bridge.waitFor(() => phone.bridge.tunnel.starts > starts && phone.bridge.tunnel.up, 30000, 'tunnel_start again');
    assert.equal(phone.url, url, 'the same key, the same URL');
    // Traffic flows through the re-opened tunnel again.
    const forwarded = phone.front.forwarded;
    await eventually(async () => (await replicaOf(url))?.state === 'healthy', { timeoutMs: 60000, everyMs: 100, what: 'healthy again' });
    const answer = await ask(client());
    assert.equal(answer.object, 'chat.completion');
    assert.ok(phone.front.forwarded > forwarded, 'the answer came through the tunnel');
  });

  test('SIGTERM stops the tunnel and deregisters: the gateway no longer lists the phone', async () => {
    assert.ok(phone, 'the phone of the previous test runs');
    const url = phone.url;
    assert.ok(await replicaOf(url));
    const result = await phone.proc.stop({ timeoutMs: 30000 });
    assert.deepEqual(result, { code: 0, signal: null }, phone.proc.text.slice(-2000));
    assert.ok(phone.proc.logs.some((l) => l.msg === 'deregistered from the gateway'));
    assert.ok(phone.bridge.tunnel.stops >= 1, 'tunnel_stop was called');
    const order = (msg) => phone.proc.logs.findIndex((l) => l.msg === msg);
    assert.ok(order('tunnel stopped') >= 0 && order('tunnel stopped') < order('deregistered from the gateway'), 'the tunnel closed first');
    await eventually(async () => (await replicaOf(url)) === undefined, { timeoutMs: 10000, what: 'the phone gone from /admin/v1/replicas' });
    // Nothing the phone logged holds a secret.
    for (const [name, value] of Object.entries(SECRETS)) {
      assert.ok(!phone.proc.text.includes(value), `the phone's output contains ${name}'s value`);
      assert.ok(!gw.stderrText.includes(value), `the gateway's log contains ${name}'s value`);
    }
    phone = null;
  });

  test('a wrong checksum fails with a clear error, and no traffic reaches the phone', async () => {
    phone = await startProcessor({ projectDir: badProject, root: path.join(dir, 'bad-phone'), values: SECRETS, hostsFile, certs, deploymentId: 'dep-acurast-it-2' });
    phones.push(phone);
    const failed = await phone.proc.waitForLog((l) => l.msg === 'model download failed', { timeoutMs: 60000, what: 'the download failing' });
    assert.match(JSON.stringify(failed), new RegExp(`sha256 mismatch: expected ${'e'.repeat(64)}, got ${sha256File(MODEL_FILE)}`));
    // The tunnel opens (with the operator's key: stable_url), but the phone never registers.
    await phone.proc.waitForLog((l) => l.msg === 'tunnel open', { timeoutMs: 30000, what: 'the tunnel open' });
    assert.equal(phone.url, tunnelUrlForKey(SECRETS.FLEETGATE_TUNNEL_KEY));
    assert.ok(phone.proc.running, 'the agent stays up, loading, with the reason');
    assert.ok(!phone.proc.logs.some((l) => l.msg === 'engine started'), 'llama-server is never started');
    assert.ok(!phone.proc.logs.some((l) => l.msg === 'registered with the gateway'));
    const mine = (await replicas(gw)).filter((r) => r.url === phone.url || r.deployment_id === 'dep-acurast-it-2');
    assert.deepEqual(mine, [], 'the gateway never heard of it');
    assert.equal(phone.front.forwarded, 0, 'nothing came through its tunnel');
    assert.ok(!fs.existsSync(path.join(phone.app, 'models', `${MODEL}.gguf`)), 'no model file left');
    const result = await phone.proc.stop({ timeoutMs: 30000 });
    assert.equal(result.code, 0);
    phone = null;
  });
});
