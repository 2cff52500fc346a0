// fleetgate-agent in front of a local engine: a fake llama-server (Node) proves the llama-server
// engine takes its slots from GET /props, reports "loading" until the engine's /health is 200,
// relays answers byte for byte (streams chunk by chunk, as they come), closes the engine
// connection when the client goes away, and enforces its slots; the openai engine (health by
// GET /v1/models, configured slots); engine.command starting, restarting and stopping the engine.
//
// Binary: $FLEETGATE_AGENT_BIN, default build/bin/fleetgate-agent (relative to the repository).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { REPO_ROOT, eventually, makeTempDir, removeDir, request, sleep } from './lib/gateway.mjs';
import { startAgent as launchAgent, stopAgent } from './lib/agent.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN ?? path.join(REPO_ROOT, 'build/bin/fleetgate-agent');
const MODEL = 'qwen3.5-test';

const startAgent = (args, env = {}) =>
  launchAgent(['--listen', '127.0.0.1:0', '--model', MODEL, ...args], { env });

const health = async (agent) => request(`${agent.base}/health`);
const chat = (extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content: 'RISK?' }], ...extra });

// Odd but valid bytes: non-ASCII text, escaped characters, spacing a re-serialiser would change.
const ANSWER = 'RISK_LEVEL: 5 — ünïcödé ✓ "quoted"\\n';

// A fake llama.cpp server. GET /health: 503 "Loading model" until loadingMs passed, then 200;
// GET /props: total_slots; POST /v1/chat/completions: a JSON answer (Content-Length) or an SSE
// stream (chunked) of `events` events `intervalMs` apart, as the body's "fake" field asks.
// Records every completion request: the bytes it sent, whether the client closed early.
class FakeLlama {
  constructor({ loadingMs = 0, totalSlots = 2, openaiOnly = false } = {}) {
    this.readyAt = Date.now() + loadingMs;
    this.totalSlots = totalSlots;
    this.openaiOnly = openaiOnly;
    this.requests = [];
    this.healthProbes = 0;
    this.server = http.createServer((req, res) => this.answer(req, res));
  }

  async listen() {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${this.server.address().port}`;
  }

  async close() {
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }

  answer(req, res) {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/health' && !this.openaiOnly) {
        this.healthProbes++;
        if (Date.now() < this.readyAt) {
          res.writeHead(503, { 'Content-Type': 'application/json' });
          return res.end('{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}');
        }
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end('{"status":"ok"}');
      }
      if (req.method === 'GET' && req.url === '/props' && !this.openaiOnly) {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ total_slots: this.totalSlots, model_path: '/models/fake.gguf' }));
      }
      if (req.method === 'GET' && req.url === '/v1/models') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end('{"object":"list","data":[{"id":"fake.gguf","object":"model"}]}');
      }
      if (req.method === 'POST' && req.url === '/v1/chat/completions') {
        return this.complete(req, res, JSON.parse(body));
      }
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end('{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}');
    });
  }

  complete(req, res, body) {
    const record = { body, headers: req.headers, sent: [], finished: false, closedEarly: false, closedAt: null, at: Date.now() };
    this.requests.push(record);
    const { events = 3, intervalMs = 10, firstDelayMs = 0 } = body.fake ?? {};
    res.on('close', () => {
      if (!record.finished) {
        record.closedEarly = true;
        record.closedAt = Date.now();
      }
    });
    const timings = { prompt_n: 2, cache_n: 0, prompt_ms: 20, prompt_per_second: 100, predicted_n: events, predicted_ms: 50, predicted_per_second: 60 };
    if (!body.stream) {
      const text = `{"id":"chatcmpl-fake","object":"chat.completion","created":1,"model":"fake.gguf",  "choices":[{"index":0,"message":{"role":"assistant","content":${JSON.stringify(ANSWER)}},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":${events},"total_tokens":${2 + events}},"timings":${JSON.stringify(timings)}}`;
      const bytes = Buffer.from(text);
      record.sent.push(bytes);
      setTimeout(() => {
        res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': bytes.length });
        record.finished = true;
        res.end(bytes);
      }, firstDelayMs);
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    res.flushHeaders();
    let i = 0;
    const send = () => {
      if (record.closedEarly) {
        return;
      }
      if (i < events) {
        const chunk = { id: 'chatcmpl-fake', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `${ANSWER}${i}` } }] };
        const bytes = Buffer.from(`data: ${JSON.stringify(chunk)}\n\n`);
        record.sent.push(bytes);
        res.write(bytes);
        i++;
        setTimeout(send, intervalMs);
        return;
      }
      const last = Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], timings })}\n\ndata: [DONE]\n\n`);
      record.sent.push(last);
      record.finished = true;
      res.end(last);
    };
    setTimeout(send, firstDelayMs);
  }
}

// Streams a request through the agent, recording when each piece arrived.
function streamThrough(agent, body, { onPiece } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const req = http.request(`${agent.base}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' } }, (res) => {
      const pieces = [];
      res.on('data', (c) => {
        pieces.push({ bytes: c, ms: Date.now() - t0 });
        if (onPiece?.(pieces, req) === 'stop') {
          req.destroy();
          resolve({ status: res.statusCode, headers: res.headers, pieces, aborted: true });
        }
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, pieces, body: Buffer.concat(pieces.map((p) => p.bytes)) }));
      res.on('error', () => {});
    });
    req.on('error', (e) => (e.code === 'ECONNRESET' ? undefined : reject(e)));
    req.end(JSON.stringify(body));
  });
}

describe('llama-server engine', () => {
  let engine;
  let agent;
  before(async () => {
    engine = new FakeLlama({ loadingMs: 1200, totalSlots: 2 });
    await engine.listen();
    agent = await startAgent(['--engine', 'llama-server', '--engine-url', engine.url]);
  });
  after(async () => {
    stopAgent(agent);
    await engine.close();
  });

  test('loading until the engine\'s /health is 200; then slots from /props', async () => {
    const early = await health(agent);
    assert.equal(early.status, 503);
    assert.equal(early.json.status, 'loading');
    const refused = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(refused.status, 503);
    assert.equal(refused.json.error.code, 'model_loading');
    assert.ok(refused.headers['retry-after']);
    assert.equal(engine.requests.length, 0, 'nothing forwarded while loading');
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: 5000, what: 'the agent ready' });
    const h = (await health(agent)).json;
    assert.equal(h.status, 'ok');
    assert.equal(h.engine, 'llama-server');
    assert.equal(h.slots_total, 2, 'total_slots from GET /props');
    assert.ok(!('profile' in h));
    assert.ok(agent.logs.some((l) => l.msg === 'engine slots from /props' && l.slots === 2));
  });

  test('a whole answer is relayed byte for byte, with its status and content type', async () => {
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat(), headers: { 'X-Request-Id': 'proxy-test-1' } });
    assert.equal(res.status, 200);
    const rec = engine.requests.at(-1);
    assert.ok(res.body.equals(Buffer.concat(rec.sent)), `relayed bytes differ:\n${res.text}`);
    assert.equal(res.headers['content-type'], 'application/json; charset=utf-8');
    assert.equal(res.requestId, 'proxy-test-1');
    assert.equal(rec.headers['x-request-id'], 'proxy-test-1', 'the request id reaches the engine');
    assert.deepEqual(rec.body, chat(), 'the request body reaches the engine unchanged');
    const metrics = (await request(`${agent.base}/metrics`)).text;
    assert.match(metrics, /fleetgate_agent_decode_tokens_per_second 60\b/, 'timings from the engine');
    assert.match(metrics, /fleetgate_agent_tokens_total\{kind="completion"\} 3\b/);
  });

  test('a stream is relayed chunk by chunk as the engine sends it, byte for byte', async () => {
    const res = await streamThrough(agent, chat({ stream: true, fake: { events: 4, intervalMs: 300 } }));
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'], /^text\/event-stream/);
    const rec = engine.requests.at(-1);
    assert.ok(res.body.equals(Buffer.concat(rec.sent)), 'relayed stream bytes differ');
    // The first event reached the client long before the engine finished (4 x 300 ms).
    const firstData = res.pieces.find((p) => p.bytes.includes('data: '));
    assert.ok(firstData.ms < 600, `first event after ${firstData.ms} ms`);
    assert.ok(res.pieces.at(-1).ms >= 1100, `last piece after ${res.pieces.at(-1).ms} ms`);
    assert.ok(res.pieces.length >= 4, `${res.pieces.length} pieces: not buffered into one`);
  });

  test('a client that goes away closes the engine connection and frees the slot', async () => {
    const res = await streamThrough(agent, chat({ stream: true, fake: { events: 100, intervalMs: 100 } }), {
      onPiece: (pieces) => (Buffer.concat(pieces.map((p) => p.bytes)).includes('data: ') ? 'stop' : undefined),
    });
    assert.equal(res.aborted, true);
    const abortedAt = Date.now();
    const rec = engine.requests.at(-1);
    await eventually(() => rec.closedEarly, { timeoutMs: 2000, what: 'the engine connection closed' });
    assert.ok(rec.closedAt - abortedAt < 1000, `engine connection closed ${rec.closedAt - abortedAt} ms after the client left`);
    assert.ok(rec.sent.length < 20, 'the engine stopped being read');
    await eventually(async () => (await health(agent)).json.slots_idle === 2, { timeoutMs: 2000, what: 'the slot freed' });
    const line = agent.logs.findLast((l) => l.msg === 'request');
    assert.equal(line.outcome, 'client_gone');
  });

  test('admission: the slot+1th request gets 503 at once, without reaching the engine', async () => {
    const base = engine.requests.length;
    const held = [0, 1].map(() => streamThrough(agent, chat({ stream: true, fake: { events: 3, intervalMs: 400 } })));
    await eventually(() => engine.requests.length === base + 2, { timeoutMs: 2000, what: 'both at the engine' });
    assert.equal((await health(agent)).json.slots_idle, 0, 'both slots busy');
    const before = engine.requests.length;
    const t0 = Date.now();
    const third = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(third.status, 503);
    assert.equal(third.json.error.code, 'slots_busy');
    assert.equal(third.headers['retry-after'], '1');
    assert.ok(Date.now() - t0 < 500, 'refused at once');
    assert.equal(engine.requests.length, before, 'not forwarded');
    for (const r of await Promise.all(held)) {
      assert.equal(r.status, 200);
    }
  });

  test('an engine that goes away: 502 to the client, then loading until it is back', async () => {
    await engine.close();
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.ok([502, 503].includes(res.status), `${res.status} ${res.text}`);
    await eventually(async () => (await health(agent)).json.status === 'loading', { timeoutMs: 5000, what: 'loading again' });
  });
});

describe('openai engine', () => {
  let engine;
  let agent;
  before(async () => {
    engine = new FakeLlama({ openaiOnly: true });
    await engine.listen();
    agent = await startAgent(['--engine', 'openai', '--engine-url', engine.url, '--slots', '3']);
  });
  after(async () => {
    stopAgent(agent);
    await engine.close();
  });

  test('ready by GET /v1/models, configured slots, answers relayed', async () => {
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: 5000, what: 'the agent ready' });
    const h = (await health(agent)).json;
    assert.equal(h.engine, 'openai');
    assert.equal(h.slots_total, 3);
    assert.equal(engine.healthProbes, 0, 'llama-server\'s /health is not probed');
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(res.status, 200);
    assert.ok(res.body.equals(Buffer.concat(engine.requests.at(-1).sent)));
    const models = await request(`${agent.base}/v1/models`);
    assert.deepEqual(models.json.data.map((m) => m.id), [MODEL], 'the agent names its own model');
  });
});

describe('engine.command: the agent starts and supervises the engine', () => {
  let dir;
  let agent;
  let port;
  before(async () => {
    dir = makeTempDir('fleetgate-agent-engine-');
    const server = net.createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = server.address().port;
    server.close();
    await once(server, 'close');
    const script = path.join(dir, 'fake-llama.mjs');
    fs.writeFileSync(script, `
import http from 'node:http';
const port = Number(process.argv[2]);
const readyAt = Date.now() + 300;
http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.setHeader('Content-Type', 'application/json');
    if (req.url === '/health') {
      res.statusCode = Date.now() < readyAt ? 503 : 200;
      return res.end(res.statusCode === 200 ? '{"status":"ok"}' : '{"error":{"code":503,"message":"Loading model"}}');
    }
    if (req.url === '/props') return res.end('{"total_slots":1}');
    res.end(JSON.stringify({ object: 'chat.completion', pid: process.pid, choices: [] }));
  });
}).listen(port, '127.0.0.1');
`);
    fs.writeFileSync(path.join(dir, 'agent.yaml'), [
      `model: ${MODEL}`,
      'engine:',
      '  kind: llama-server',
      `  url: http://127.0.0.1:${port}`,
      `  command: [${JSON.stringify(process.execPath)}, ${JSON.stringify(script)}, "${port}"]`,
      'drain_timeout: 2s',
      '',
    ].join('\n'));
    agent = await startAgent(['--config', path.join(dir, 'agent.yaml')]);
  });
  after(() => {
    stopAgent(agent);
    removeDir(dir);
  });

  const pidAlive = (pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };

  test('started, restarted after it dies, stopped with the agent', async () => {
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: 8000, what: 'the engine ready' });
    const first = agent.logs.find((l) => l.msg === 'engine started');
    assert.ok(first?.pid > 0);
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(res.json.pid, first.pid, 'served by the child');

    process.kill(first.pid, 'SIGKILL');
    await eventually(() => agent.logs.some((l) => l.msg === 'engine exited; restarting'), { timeoutMs: 3000, what: 'the exit noticed' });
    await eventually(() => agent.logs.filter((l) => l.msg === 'engine started').length === 2, { timeoutMs: 5000, what: 'the restart' });
    const second = agent.logs.filter((l) => l.msg === 'engine started')[1];
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: 8000, what: 'ready again' });
    const again = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(again.json.pid, second.pid);

    process.kill(agent.proc.pid, 'SIGTERM');
    const [code] = await agent.exited;
    assert.equal(code, 0);
    await sleep(100);
    assert.equal(pidAlive(second.pid), false, 'the engine is stopped with the agent');
  });
});
