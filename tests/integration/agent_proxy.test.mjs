// fleetgate-agent in front of a local engine: a fake llama-server (Node) proves the llama-server
// engine takes its slots from GET /props, reports "loading" until the engine's /health is 200,
// relays answers byte for byte (streams chunk by chunk, as they come), closes the engine
// connection when the client goes away, and enforces its slots; the openai engine (health by
// GET /v1/models, configured slots); engine.command starting, restarting and stopping the engine.
//
// Every check waits for an event or polls a condition with a deadline; none sleeps and counts,
// none asserts that something took less than N ms. Where order matters the fake engine is driven
// by the test rather than by timers: it stays loading until told, sends a stream's next event
// only once the client has the previous one (lockstep), or holds a stream open until released.
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

import { REPO_ROOT, eventually, makeTempDir, removeDir, request } from './lib/gateway.mjs';
import { startAgent as launchAgent, stopAgent } from './lib/agent.mjs';

const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN ?? path.join(REPO_ROOT, 'build/bin/fleetgate-agent');
const MODEL = 'qwen3.5-test';

const startAgent = (args, env = {}) =>
  launchAgent(['--listen', '127.0.0.1:0', '--model', MODEL, ...args], { env });

const health = async (agent) => request(`${agent.base}/health`);
const chat = (extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content: 'RISK?' }], ...extra });

// Odd but valid bytes: non-ASCII text, escaped characters, spacing a re-serialiser would change.
const ANSWER = 'RISK_LEVEL: 5 — ünïcödé ✓ "quoted"\\n';

// A generous deadline: it only says when to give up waiting for an event.
const DEADLINE_MS = 10_000;

// A fake llama.cpp server. GET /health: 503 "Loading model" until `ready` is set, then 200;
// GET /props: total_slots; POST /v1/chat/completions: a JSON answer (Content-Length) or an SSE
// stream (chunked) of `events` events `intervalMs` apart, as the body's "fake" field asks. With
// "lockstep", event i (and the final one) waits until record.proceed() was called i times (the
// client saw i events); with "hold", the events after the first wait for record.release().
// Records every completion request: the bytes it sent, whether the client closed early.
class FakeLlama {
  constructor({ ready = true, totalSlots = 2, openaiOnly = false } = {}) {
    this.ready = ready;
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
        if (!this.ready) {
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
    const { events = 3, intervalMs = 10, firstDelayMs = 0, lockstep = false, hold = false } = body.fake ?? {};
    // Gates of "lockstep" and "hold": send() returns early and is called again when they open.
    let credits = 0;
    let released = !hold;
    let resume = null;
    const wake = () => {
      const again = resume;
      resume = null;
      again?.();
    };
    record.proceed = () => {
      credits++;
      wake();
    };
    record.release = () => {
      released = true;
      wake();
    };
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
      if ((lockstep && credits < i) || (i > 0 && !released)) {
        resume = send;
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

// promise, or a rejection naming what did not happen within timeoutMs.
async function withDeadline(promise, timeoutMs, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

describe('llama-server engine', () => {
  let engine;
  let agent;
  before(async () => {
    engine = new FakeLlama({ ready: false, totalSlots: 2 });
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
    engine.ready = true;
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: DEADLINE_MS, what: 'the agent ready' });
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
    // Lockstep: the engine sends each event only once the client has the one before, so a relay
    // that buffered would stall here (and fail at the deadline) instead of merely being slow.
    const seen = (pieces) => Buffer.concat(pieces.map((p) => p.bytes)).toString().split('data: ').length - 1;
    let acknowledged = 0;
    const res = await withDeadline(
      streamThrough(agent, chat({ stream: true, fake: { events: 4, lockstep: true } }), {
        onPiece: (pieces) => {
          for (const n = seen(pieces); acknowledged < n; acknowledged++) {
            engine.requests.at(-1).proceed();
          }
        },
      }),
      DEADLINE_MS,
      'the lockstep stream',
    );
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'], /^text\/event-stream/);
    const rec = engine.requests.at(-1);
    assert.ok(res.body.equals(Buffer.concat(rec.sent)), 'relayed stream bytes differ');
    assert.ok(res.pieces.length >= 5, `${res.pieces.length} pieces for 5 sends: not one per send`);
  });

  test('a client that goes away closes the engine connection and frees the slot', async () => {
    // Held after its first event: the stream can only end because the client left.
    const res = await streamThrough(agent, chat({ stream: true, fake: { events: 100, hold: true } }), {
      onPiece: (pieces) => (Buffer.concat(pieces.map((p) => p.bytes)).includes('data: ') ? 'stop' : undefined),
    });
    assert.equal(res.aborted, true);
    const rec = engine.requests.at(-1);
    await eventually(() => rec.closedEarly, { timeoutMs: DEADLINE_MS, what: 'the engine connection closed' });
    assert.equal(rec.finished, false, 'the engine never got to the end of its stream');
    assert.equal(rec.sent.length, 1, 'the engine sent only the first event');
    await eventually(async () => (await health(agent)).json.slots_idle === 2, { timeoutMs: DEADLINE_MS, what: 'the slot freed' });
    const line = agent.logs.findLast((l) => l.msg === 'request');
    assert.equal(line.outcome, 'client_gone');
  });

  test('admission: the slot+1th request gets 503 while both slots are held, without reaching the engine', async () => {
    const base = engine.requests.length;
    // Both streams are held open by the engine until the test releases them: the third request
    // can only be answered by refusing it, never by waiting for a slot.
    const held = [0, 1].map(() => streamThrough(agent, chat({ stream: true, fake: { events: 3, hold: true } })));
    await eventually(() => engine.requests.length === base + 2, { timeoutMs: DEADLINE_MS, what: 'both at the engine' });
    assert.equal((await health(agent)).json.slots_idle, 0, 'both slots busy');
    const before = engine.requests.length;
    const third = await withDeadline(
      request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() }),
      DEADLINE_MS,
      'the third answer',
    );
    assert.equal(third.status, 503);
    assert.equal(third.json.error.code, 'slots_busy');
    assert.equal(third.headers['retry-after'], '1');
    assert.equal(engine.requests.length, before, 'not forwarded');
    assert.ok(engine.requests.slice(base).every((r) => !r.finished), 'answered while both were held');
    for (const rec of engine.requests.slice(base)) {
      rec.release();
    }
    for (const r of await Promise.all(held)) {
      assert.equal(r.status, 200);
    }
  });

  test('an engine that goes away: 502 to the client, then loading until it is back', async () => {
    await engine.close();
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.ok([502, 503].includes(res.status), `${res.status} ${res.text}`);
    await eventually(async () => (await health(agent)).json.status === 'loading', { timeoutMs: DEADLINE_MS, what: 'loading again' });
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
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: DEADLINE_MS, what: 'the agent ready' });
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
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: DEADLINE_MS, what: 'the engine ready' });
    const first = agent.logs.find((l) => l.msg === 'engine started');
    assert.ok(first?.pid > 0);
    const res = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(res.json.pid, first.pid, 'served by the child');

    process.kill(first.pid, 'SIGKILL');
    await eventually(() => agent.logs.some((l) => l.msg === 'engine exited; restarting'), { timeoutMs: DEADLINE_MS, what: 'the exit noticed' });
    await eventually(() => agent.logs.filter((l) => l.msg === 'engine started').length === 2, { timeoutMs: DEADLINE_MS, what: 'the restart' });
    const second = agent.logs.filter((l) => l.msg === 'engine started')[1];
    await eventually(async () => (await health(agent)).status === 200, { timeoutMs: DEADLINE_MS, what: 'ready again' });
    const again = await request(`${agent.base}/v1/chat/completions`, { method: 'POST', body: chat() });
    assert.equal(again.json.pid, second.pid);

    process.kill(agent.proc.pid, 'SIGTERM');
    const [code] = await withDeadline(agent.exited, DEADLINE_MS, 'the agent to exit');
    assert.equal(code, 0);
    await eventually(() => !pidAlive(second.pid), { timeoutMs: DEADLINE_MS, what: 'the engine stopped with the agent' });
  });
});
