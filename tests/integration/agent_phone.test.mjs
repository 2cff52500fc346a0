// fleetgate-agent as it runs on an Acurast phone (issue 12), against fakes on 127.0.0.1: the
// gateway's URL challenge (an HMAC of the nonce under the registration's secret), the model
// download (resumed with a Range request after the server drops the connection once, checked
// against its SHA-256; a wrong checksum fails with both digests and never registers), and the
// tunnel through the bridge (tests/integration/lib/fake_bridge.mjs): the registration carries the
// tunnel's URL, the deployment id and the end time; a dropped tunnel is opened again; SIGTERM
// stops the tunnel and then deregisters.
//
// Binary: $FLEETGATE_AGENT_BIN (default build/bin/fleetgate-agent).
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import { eventually, request } from './lib/gateway.mjs';
import { startAgent, stopAgent } from './lib/agent.mjs';
import { makeTunnelKey, startFakeBridge, tunnelUrlForKey } from './lib/fake_bridge.mjs';
import { writeRangeHead } from './lib/range.mjs';

const MODEL = 'qwen3.5-test';
const TOKEN = 'phone-registration-token';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'fg-agent-phone-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// A fake gateway admin listener that records registrations, heartbeats and deregistrations and
// hands out a secret.
async function startFakeGateway() {
  const gw = { calls: [], secret: crypto.randomBytes(32).toString('hex') };
  gw.server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const m = /^\/admin\/v1\/replicas\/(?:(register)|r1\/(heartbeat|deregister))$/.exec(req.url);
      const kind = m ? m[1] ?? m[2] : 'other';
      gw.calls.push({ kind, auth: req.headers.authorization, secret: req.headers['fleetgate-replica-secret'], body: body ? JSON.parse(body) : null, at: Date.now() });
      res.writeHead(m ? 200 : 404, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(kind === 'register' ? { id: 'r1', secret: gw.secret, heartbeat_interval_s: 0.3, slots: 1 } : {}));
    });
  });
  gw.server.listen(0, '127.0.0.1');
  await once(gw.server, 'listening');
  gw.url = `http://127.0.0.1:${gw.server.address().port}`;
  gw.of = (kind) => gw.calls.filter((c) => c.kind === kind);
  gw.close = async () => {
    gw.server.closeAllConnections();
    gw.server.close();
    await once(gw.server, 'close');
  };
  return gw;
}

// A file server that honours Range and, while dropOnce is set, cuts the first answer after
// dropAfter bytes (the socket destroyed mid-body).
async function startModelServer(content, { dropAfter = 0 } = {}) {
  const srv = { requests: [], dropOnce: dropAfter > 0 };
  srv.server = http.createServer((req, res) => {
    srv.requests.push({ url: req.url, range: req.headers.range ?? null });
    if (req.url !== '/q.gguf') {
      res.writeHead(404).end();
      return;
    }
    const start = writeRangeHead(req, res, content.length);
    if (start === null) {
      return;
    }
    if (srv.dropOnce) {
      srv.dropOnce = false;
      res.write(content.subarray(start, start + dropAfter), () => setTimeout(() => req.socket.destroy(), 50));
      return;
    }
    res.end(content.subarray(start));
  });
  srv.server.listen(0, '127.0.0.1');
  await once(srv.server, 'listening');
  srv.url = `http://127.0.0.1:${srv.server.address().port}/q.gguf`;
  srv.close = async () => {
    srv.server.closeAllConnections();
    srv.server.close();
    await once(srv.server, 'close');
  };
  return srv;
}

const health = async (agent) => (await request(`${agent.base}/health`)).json;
const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');
const baseArgs = ['--model', MODEL, '--listen', '127.0.0.1:0', '--log-level', 'debug'];
const gatewayArgs = (gw) => ['--gateway-url', gw.url, '--gateway-token-env', 'FG_PHONE_TOKEN'];

describe('URL challenge', () => {
  test('503 before registration, 400 for a bad nonce, then the HMAC under the secret', async () => {
    // The agent is started before the gateway listens there: it cannot register at first.
    const gw = await startFakeGateway();
    const port = gw.server.address().port;
    await gw.close();
    const agent = await startAgent([...baseArgs, '--public-url', 'http://127.0.0.1:1', '--gateway-url', `http://127.0.0.1:${port}`, '--gateway-token-env', 'FG_PHONE_TOKEN'], { env: { FG_PHONE_TOKEN: TOKEN } });
    try {
      const nonce = crypto.randomBytes(32).toString('hex');
      let res = await request(`${agent.base}/fleetgate/v1/challenge?nonce=${nonce}`);
      assert.equal(res.status, 503);
      assert.equal(res.json.error.code, 'not_registered');
      assert.equal(res.headers['retry-after'], '1');

      gw.server.listen(port, '127.0.0.1');
      await once(gw.server, 'listening');
      await eventually(() => gw.of('register').length > 0, { timeoutMs: 10000, what: 'registration' });
      await eventually(async () => (await request(`${agent.base}/fleetgate/v1/challenge?nonce=${nonce}`)).status === 200, { what: 'challenge answered' });
      res = await request(`${agent.base}/fleetgate/v1/challenge?nonce=${nonce}`);
      const want = crypto.createHmac('sha256', gw.secret).update(`fleetgate-url-challenge:${nonce}`).digest('hex');
      assert.deepEqual(res.json, { hmac: want });
      // Another nonce, another answer; upper-case hex is a nonce too.
      const other = crypto.randomBytes(32).toString('hex').toUpperCase();
      res = await request(`${agent.base}/fleetgate/v1/challenge?nonce=${other}`);
      assert.equal(res.json.hmac, crypto.createHmac('sha256', gw.secret).update(`fleetgate-url-challenge:${other}`).digest('hex'));

      for (const bad of ['', '?nonce=', `?nonce=${nonce.slice(1)}`, `?nonce=${nonce}0`, `?nonce=${'g'.repeat(64)}`]) {
        res = await request(`${agent.base}/fleetgate/v1/challenge${bad}`);
        assert.equal(res.status, 400, bad);
        assert.equal(res.json.error.code, 'invalid_nonce');
      }
      res = await request(`${agent.base}/fleetgate/v1/challenge?nonce=${nonce}`, { method: 'POST', body: '{}' });
      assert.equal(res.status, 405);
      assert.ok(!agent.logs.some((l) => JSON.stringify(l).includes(gw.secret)), 'the secret is never logged');
    } finally {
      stopAgent(agent);
      await gw.close();
    }
  });
});

describe('model download', () => {
  const content = crypto.randomBytes(3 * 1024 * 1024 + 123);

  test('resumes after a dropped connection, verifies, then serves and registers', async () => {
    const srv = await startModelServer(content, { dropAfter: 1024 * 1024 });
    const gw = await startFakeGateway();
    const file = path.join(tmp, 'resume.gguf');
    const agent = await startAgent([...baseArgs, '--public-url', 'http://127.0.0.1:1', ...gatewayArgs(gw),
      '--model-url', srv.url, '--model-sha256', sha256(content), '--model-path', file], { env: { FG_PHONE_TOKEN: TOKEN } });
    try {
      await eventually(async () => (await health(agent))?.model_download?.state === 'done', { timeoutMs: 20000, what: 'download done' });
      const h = await health(agent);
      assert.equal(h.status, 'ok');
      assert.deepEqual(h.model_download, { bytes_done: content.length, bytes_total: content.length, state: 'done' });
      assert.ok(fs.readFileSync(file).equals(content));
      assert.ok(!fs.existsSync(`${file}.part`));
      // The first GET had no Range; the second resumed where the part ended.
      assert.equal(srv.requests[0].range, null);
      assert.ok(srv.requests.length >= 2, JSON.stringify(srv.requests));
      const resumed = srv.requests.find((r) => r.range !== null);
      assert.ok(resumed, 'a Range request');
      const offset = Number(/^bytes=(\d+)-$/.exec(resumed.range)[1]);
      assert.ok(offset >= 1024 * 1024 && offset < content.length, `resumed from ${offset}`);
      assert.ok(agent.logs.some((l) => l.msg === 'model download interrupted: resuming'));
      await eventually(() => gw.of('register').length > 0, { timeoutMs: 10000, what: 'registration after the download' });
      const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } });
      assert.equal(res.status, 200);

      // A restart finds the file in place and verified: no download.
      stopAgent(agent);
      await agent.exited;
      const before = srv.requests.length;
      const again = await startAgent([...baseArgs, '--model-url', srv.url, '--model-sha256', sha256(content), '--model-path', file]);
      try {
        await eventually(async () => (await health(again))?.status === 'ok', { timeoutMs: 10000, what: 'ready again' });
        assert.equal(srv.requests.length, before);
      } finally {
        stopAgent(again);
      }
    } finally {
      stopAgent(agent);
      await srv.close();
      await gw.close();
    }
  });

  test('a partial file left by an earlier run is resumed', async () => {
    const srv = await startModelServer(content);
    const file = path.join(tmp, 'part.gguf');
    fs.writeFileSync(`${file}.part`, content.subarray(0, 2000000));
    const agent = await startAgent([...baseArgs, '--model-url', srv.url, '--model-sha256', sha256(content), '--model-path', file]);
    try {
      await eventually(async () => (await health(agent))?.model_download?.state === 'done', { timeoutMs: 20000, what: 'download done' });
      assert.deepEqual(srv.requests.map((r) => r.range), ['bytes=2000000-']);
      assert.ok(fs.readFileSync(file).equals(content));
    } finally {
      stopAgent(agent);
      await srv.close();
    }
  });

  test('a wrong sha256 fails naming both digests; loading, never registered', async () => {
    const srv = await startModelServer(content);
    const gw = await startFakeGateway();
    const file = path.join(tmp, 'wrong.gguf');
    const wrong = 'ab'.repeat(32);
    const agent = await startAgent([...baseArgs, '--public-url', 'http://127.0.0.1:1', ...gatewayArgs(gw),
      '--model-url', srv.url, '--model-sha256', wrong, '--model-path', file], { env: { FG_PHONE_TOKEN: TOKEN } });
    try {
      await eventually(async () => (await health(agent))?.model_download?.state === 'failed', { timeoutMs: 20000, what: 'download failed' });
      const res = await request(`${agent.base}/health`);
      assert.equal(res.status, 503);
      assert.equal(res.json.status, 'loading');
      assert.equal(res.json.model_download.error, `sha256 mismatch: expected ${wrong}, got ${sha256(content)}`);
      assert.ok(!fs.existsSync(file) && !fs.existsSync(`${file}.part`));
      const chat = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: { model: MODEL, messages: [{ role: 'user', content: 'hi' }] } });
      assert.equal(chat.status, 503);
      assert.equal(chat.json.error.code, 'model_loading');
      assert.equal(gw.calls.length, 0, 'no registration');
      assert.ok(agent.logs.some((l) => l.msg === 'model download failed' && l.level === 'error'));
    } finally {
      stopAgent(agent);
      await srv.close();
      await gw.close();
    }
  });

  test('a 404 fails at once with the status', async () => {
    const srv = await startModelServer(content);
    const agent = await startAgent([...baseArgs, '--model-url', srv.url.replace('q.gguf', 'missing.gguf'), '--model-sha256', sha256(content), '--model-path', path.join(tmp, 'missing.gguf')]);
    try {
      await eventually(async () => (await health(agent))?.model_download?.state === 'failed', { timeoutMs: 10000, what: 'download failed' });
      assert.equal((await health(agent)).model_download.error, 'HTTP 404 from the model URL');
    } finally {
      stopAgent(agent);
      await srv.close();
    }
  });
});

describe('acurast tunnel', () => {
  test('registers the tunnel URL with the deployment; re-opens a dropped tunnel; SIGTERM stops it, then deregisters', async () => {
    const key = makeTunnelKey();
    // The fake tunnel hands out the agent's own address, so the URL answers (the gateway side
    // with a TLS front is tests/acurast/).
    const bridge = await startFakeBridge({ deploymentId: 'dep-7f3a', urlFor: (p) => `http://${p.localAddr}` });
    const gw = await startFakeGateway();
    const agent = await startAgent([...baseArgs, ...gatewayArgs(gw), '--tunnel', 'acurast', '--tunnel-key-env', 'FG_TUNNEL_KEY',
      '--tunnel-relays', 'relay-1.mainnet.acurast.com:4433,relay-2.mainnet.acurast.com:4433', '--tunnel-domain-suffix', 'canary.acu.run',
      '--tunnel-poll-interval', '200ms'],
    { env: { FG_PHONE_TOKEN: TOKEN, FG_TUNNEL_KEY: key, BRIDGE_SOCKET: bridge.name, FLEETGATE_DEPLOYMENT_ENDS_AT: '2026-12-05T20:00:00+02:00' } });
    try {
      await eventually(() => gw.of('register').length > 0, { timeoutMs: 10000, what: 'registration' });
      const reg = gw.of('register')[0];
      assert.equal(reg.auth, `Bearer ${TOKEN}`);
      assert.equal(reg.body.url, `http://${agent.line.address}`);
      assert.equal(reg.body.deployment_id, 'dep-7f3a');
      assert.equal(reg.body.ends_at, '2026-12-05T18:00:00Z');
      const start = bridge.calls.find((c) => c.method === 'tunnel_start');
      assert.deepEqual(start.params, {
        serverAddrs: ['relay-1.mainnet.acurast.com:4433', 'relay-2.mainnet.acurast.com:4433'],
        domainSuffix: 'canary.acu.run',
        localAddr: agent.line.address,
        primaryKey: { algorithm: 'Secp256r1', bytes: key },
        acmeStaging: false,
      });
      // deployment_id was asked before the tunnel opened; the key's own URL is stable.
      assert.ok(bridge.calls.findIndex((c) => c.method === 'deployment_id') < bridge.calls.indexOf(start));
      assert.equal(tunnelUrlForKey(key, 'canary.acu.run'), tunnelUrlForKey(key, 'canary.acu.run'));
      assert.ok(!agent.logs.some((l) => JSON.stringify(l).includes(key)), 'the key is never logged');

      await eventually(() => bridge.countCalls('tunnel_status') >= 2, { what: 'status polls' });
      assert.equal(bridge.tunnel.starts, 1);
      bridge.dropTunnel();
      await eventually(() => bridge.tunnel.starts === 2 && bridge.tunnel.up, { timeoutMs: 5000, what: 'tunnel re-opened' });
      assert.ok(agent.logs.some((l) => l.msg === 'tunnel down: opening it again'));

      process.kill(agent.proc.pid, 'SIGTERM');
      const [code] = await agent.exited;
      assert.equal(code, 0);
      const stop = bridge.calls.find((c) => c.method === 'tunnel_stop');
      const dereg = gw.of('deregister')[0];
      assert.ok(stop, 'tunnel_stop called');
      assert.ok(dereg, 'deregistered');
      assert.equal(dereg.secret, gw.secret);
      assert.ok(stop.at <= dereg.at, 'the tunnel stops before the deregistration');
      assert.equal(bridge.tunnel.up, false);
    } finally {
      stopAgent(agent);
      await gw.close();
      await bridge.close();
    }
  });

  test('a tunnel re-opened with a NEW URL registers again with that URL (the gateway then challenges it)', async () => {
    const key = makeTunnelKey();
    // The first open gives the agent's address as 127.0.0.1, every later one as localhost: a
    // different URL that still reaches the agent.
    let opens = 0;
    const bridge = await startFakeBridge({
      deploymentId: 'dep-new-url',
      urlFor: (p) => (opens++ === 0 ? `http://${p.localAddr}` : `http://${p.localAddr.replace('127.0.0.1', 'localhost')}`),
    });
    const gw = await startFakeGateway();
    const agent = await startAgent([...baseArgs, ...gatewayArgs(gw), '--tunnel', 'acurast', '--tunnel-key-env', 'FG_TUNNEL_KEY',
      '--tunnel-poll-interval', '200ms'],
    { env: { FG_PHONE_TOKEN: TOKEN, FG_TUNNEL_KEY: key, BRIDGE_SOCKET: bridge.name } });
    try {
      await eventually(() => gw.of('register').length > 0, { timeoutMs: 10000, what: 'registration' });
      assert.equal(gw.of('register')[0].body.url, `http://${agent.line.address}`);
      bridge.dropTunnel();
      const moved = `http://${agent.line.address.replace('127.0.0.1', 'localhost')}`;
      await eventually(() => bridge.tunnel.starts === 2 && bridge.tunnel.up, { timeoutMs: 5000, what: 'tunnel re-opened' });
      // Today the agent only logs the change and keeps heartbeating the old URL.
      await eventually(() => gw.of('register').some((c) => c.body.url === moved), { timeoutMs: 5000, what: 'registered again with the new URL' });
      // The old URL is gone with the old tunnel: its registration is ended first, and the new URL
      // registers as a new replica (which the gateway challenges before routing to it).
      const again = gw.of('register').find((c) => c.body.url === moved);
      const dereg = gw.of('deregister')[0];
      assert.ok(dereg && dereg.at <= again.at, 'the old registration ended before the new one');
      assert.equal(dereg.secret, gw.secret);
      assert.equal(again.body.deployment_id, 'dep-new-url');
    } finally {
      stopAgent(agent);
      await gw.close();
      await bridge.close();
    }
  });

  test('a bridge bound to the exact abstract name (not padded as Node binds it) is reached too', async () => {
    // A Python bridge: socket.bind("\0name") uses the name's exact length.
    const name = `fleetgate-exact-${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
    const script = `
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0" + sys.argv[1])
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    line = c.makefile().readline()
    req = json.loads(line)
    m = req["method"]
    res = {"deployment_id": "dep-exact", "processor_version": "1.0", "tunnel_start": {"url": "http://" + req.get("params", {}).get("localAddr", "")}, "tunnel_status": {"state": 2}, "tunnel_stop": None}.get(m)
    c.sendall((json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": res}) + "\\n").encode())
    c.close()
`;
    const { spawn } = await import('node:child_process');
    const py = spawn('python3', ['-c', script, name], { stdio: ['ignore', 'pipe', 'inherit'] });
    await once(py.stdout, 'data');
    const gw = await startFakeGateway();
    const agent = await startAgent([...baseArgs, ...gatewayArgs(gw), '--tunnel', 'acurast'], { env: { FG_PHONE_TOKEN: TOKEN, FLEETGATE_TUNNEL_KEY: makeTunnelKey(), BRIDGE_SOCKET: name } });
    try {
      await eventually(() => gw.of('register').length > 0, { timeoutMs: 10000, what: 'registration' });
      assert.equal(gw.of('register')[0].body.deployment_id, 'dep-exact');
      assert.equal(gw.of('register')[0].body.url, `http://${agent.line.address}`);
    } finally {
      stopAgent(agent);
      py.kill('SIGKILL');
      await gw.close();
    }
  });

  test('without a key (a deployment of several phones) the agent makes its own P-256 key', async () => {
    // Every phone of a deployment gets the same environment, so `fleetgate deploy acurast` passes
    // no key unless stable_url (one phone): the agent used to refuse to start then.
    const bridge = await startFakeBridge({ deploymentId: 'dep-nokey', urlFor: (p) => `http://${p.localAddr}` });
    const gw = await startFakeGateway();
    const env = { FG_PHONE_TOKEN: TOKEN, ...bridge.env, FLEETGATE_TUNNEL_KEY: '' };
    const agent = await startAgent([...baseArgs, ...gatewayArgs(gw), '--tunnel', 'acurast'], { env });
    try {
      await eventually(() => gw.of('register').length > 0, { timeoutMs: 10000, what: 'registration' });
      const key = bridge.calls.find((c) => c.method === 'tunnel_start').params.primaryKey.bytes;
      const parsed = crypto.createPrivateKey({ key: Buffer.from(key, 'base64'), format: 'der', type: 'pkcs8' });
      assert.equal(parsed.asymmetricKeyDetails.namedCurve, 'prime256v1');
      assert.ok(agent.logs.some((l) => l.msg.startsWith('tunnel key: the variable is not set, made a new one') && l.variable === 'FLEETGATE_TUNNEL_KEY'));
      assert.ok(!agent.logs.some((l) => JSON.stringify(l).includes(key)), 'the key is never logged');
    } finally {
      stopAgent(agent);
      await gw.close();
      await bridge.close();
    }
  });

  test('a missing bridge or a bad end time stops the start naming it', async () => {
    const { spawnSync } = await import('node:child_process');
    const { AGENT_BIN } = await import('./lib/agent.mjs');
    const r2 = spawnSync(AGENT_BIN, [...baseArgs, '--tunnel', 'acurast'], { env: { ...process.env, FLEETGATE_TUNNEL_KEY: 'k', BRIDGE_SOCKET: '' }, encoding: 'utf8', timeout: 5000 });
    assert.equal(r2.status, 1);
    assert.match(r2.stderr, /BRIDGE_SOCKET is not set or empty/);
    const r3 = spawnSync(AGENT_BIN, baseArgs, { env: { ...process.env, FLEETGATE_DEPLOYMENT_ENDS_AT: 'tomorrow' }, encoding: 'utf8', timeout: 5000 });
    assert.equal(r3.status, 1);
    assert.match(r3.stderr, /FLEETGATE_DEPLOYMENT_ENDS_AT must be an RFC 3339 time/);
  });
});
