// A controllable fake OpenAI-compatible replica ("phone") for the integration tests.
//
// It listens on 127.0.0.1 port 0 (HTTP, or HTTPS with a given key and certificate), records every
// request (method, path, headers, raw body, parsed JSON), counts requests in flight (and the most
// it ever saw at once), and answers with a behaviour chosen per replica (setMode) or per request
// (a "fake" object in the JSON body, merged over the replica's mode; the gateway forwards bodies
// unchanged, so it reaches us). Behaviours:
//
//   {type: 'auto'}    JSON answer, or an SSE stream when the body says "stream": true (default)
//   {type: 'json'}    a JSON answer (chat completion, text completion or embeddings by path)
//   {type: 'stream'}  an SSE stream of `chunks` events, `intervalMs` apart, then data: [DONE]
//   {type: 'status', status, body?, headers?}   any status with a body (default: OpenAI error)
//   {type: 'hang'}    accept and read the request, never answer (until the connection closes)
//   {type: 'hold'}    wait until release() is called, then answer like 'auto'
//   {type: 'break', afterChunks}   stream `afterChunks` events, then destroy the socket
//   {type: 'partial'} non-streaming: send the head and half the body, then destroy the socket
//
// Hostile behaviours (a broken or malicious phone):
//
//   {type: 'interim', interim: [100, 102, 103]}   interim (1xx) answers first, then like 'auto'
//   {type: 'trailing', trailing?}   a JSON answer, then more bytes on the same keep-alive
//                     connection (default: a whole second response no request asked for);
//                     record.trailingSent turns true (and 'trailing' is emitted) once written
//   {type: 'endlessLine', maxBytes?}   a 200 event stream of 'data: ' and then bytes with no line
//                     end, as fast as the gateway reads, until the connection closes (or
//                     maxBytes, default 64 MiB, went out: then the answer ends)
//   {type: 'reset', afterMs?, onlyReused?}   read the request, wait afterMs (default 0), destroy
//                     the connection without answering; with onlyReused, only when the request
//                     came on a connection that already carried one (a fresh one: like 'auto')
//
// Common fields: delayMs (before the response head), chunked (JSON answers: chunked encoding in
// three pieces `intervalMs` apart instead of Content-Length), firstChunkDelayMs (head sent at once, first
// stream event after this delay), chunks, intervalMs, usage (false: never report usage; streams
// report it only when the request asks with stream_options.include_usage), contentType.
//
// Each request record has: seq, method, path, headers, rawBody, json, receivedAt, sent (the bytes
// the fake wrote), sentPlain (for streams: the bytes it would have written had the request not
// asked for usage; otherwise the same as sent), chunksSent, finished, closedEarly, closedAt,
// onConnection (1 for the first request on its connection, 2 for the next, ...);
// connectionClosed(record) says whether the connection that carried it has closed since.
//
// "In flight" starts when a request's body is complete and ends just before the last byte of the
// answer is written (or when the connection is closed early). It ends *before* the final write so
// that a gateway that frees its slot on the last byte cannot be seen as over-committing.
//
// When the peer (the gateway) closes a connection while an answer is still pending, the request
// gets closedEarly = true and a 'close' event is emitted with the record.
//
// GET requests are the gateway's health probes (GET /health, or GET /v1/models for plain OpenAI
// servers): they are answered at once with 200 (or healthStatus, see setHealth) whatever the mode,
// recorded in `probes`, and never counted in `requests` or in flight.
//
// `servedModels` (option, default ['fake']) are the ids GET /v1/models lists.
//
// GET /fleetgate/v1/challenge?nonce=<64 hex> is the gateway's proof of URL control (issue 12):
// answered like the real agent, {"hmac": HMAC-SHA256(challengeSecret, "fleetgate-url-challenge:"
// + nonce)}, 503 while it has no secret, 400 for a bad nonce; recorded in `challenges`, never in
// `probes`. The secret is the one the gateway issued at registration: lifecycle_util's register()
// hands it over (fakeReplicaByUrl), or call setChallengeSecret().
//
// A refusing replica is a port nobody listens on: see closedPortUrl().

import { EventEmitter } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import crypto from 'node:crypto';

// Live fakes by URL, so that a registration helper can give a fake the secret it was issued.
const liveFakes = new Map();

export function fakeReplicaByUrl(url) {
  return liveFakes.get(String(url).replace(/\/+$/, '').toLowerCase());
}

// What the agent answers to a URL challenge (docs/lifecycle.md, proof of URL control).
export function challengeHmac(secret, nonce) {
  return crypto.createHmac('sha256', secret).update(`fleetgate-url-challenge:${nonce}`).digest('hex');
}

const DEFAULT_MODE = Object.freeze({
  type: 'auto',
  delayMs: 0,
  firstChunkDelayMs: 0,
  chunks: 3,
  intervalMs: 10,
  afterChunks: 1,
  usage: true,
});

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Float32 little-endian base64, as the OpenAI API sends for encoding_format "base64".
function floatsToBase64(values) {
  const array = new Float32Array(values);
  return Buffer.from(array.buffer).toString('base64');
}

export class FakeReplica extends EventEmitter {
  constructor({ name = 'fake', tls = null, mode = {}, keepAliveTimeoutMs = 5000, servedModels = ['fake'] } = {}) {
    super();
    this.name = name;
    this.servedModels = servedModels; // the ids its GET /v1/models lists
    this.tls = tls;
    this.keepAliveTimeoutMs = keepAliveTimeoutMs;
    this.mode = { ...DEFAULT_MODE, ...mode };
    this.requests = [];
    this.inFlight = 0;
    this.maxInFlight = 0;
    this.tlsErrors = [];
    this.connections = 0;
    this.closedSockets = new WeakSet();
    this.recordSockets = new WeakMap();
    this.server = null;
    this.port = 0;
    this.holds = [];
    this.sequence = 0;
    this.probes = [];
    this.healthStatus = 200;
    this.socketRequests = new WeakMap();
    this.challengeSecret = null;
    this.challenges = [];
  }

  // The secret URL challenges are answered with (null: 503, as an agent not registered yet).
  setChallengeSecret(secret) {
    this.challengeSecret = secret;
  }

  // Status the health probes get (200 = healthy).
  setHealth(status) {
    this.healthStatus = status;
  }

  get url() {
    return `${this.tls ? 'https' : 'http'}://127.0.0.1:${this.port}`;
  }

  // Merged over the defaults; requests' own "fake" fields override it.
  setMode(mode) {
    this.mode = { ...DEFAULT_MODE, ...mode };
  }

  // Lets every held request (type 'hold') go on; returns how many were released.
  release(count = Infinity) {
    let released = 0;
    while (this.holds.length > 0 && released < count) {
      this.holds.shift()();
      ++released;
    }
    return released;
  }

  // Whether the connection that carried this request has closed (either side).
  connectionClosed(record) {
    return this.closedSockets.has(this.recordSockets.get(record));
  }

  // Requests whose body contains a given marker (the tests tag their requests).
  requestsWith(marker) {
    return this.requests.filter((r) => r.rawBody.includes(marker));
  }

  // Resolves when predicate(this) holds; checks on every request/close/finish event and on a
  // short poll as a backstop.
  waitFor(predicate, { timeoutMs = 5000, what = 'condition' } = {}) {
    return new Promise((resolve, reject) => {
      const check = () => {
        let ok = false;
        try {
          ok = predicate(this);
        } catch (e) {
          done();
          reject(e);
          return;
        }
        if (ok) {
          done();
          resolve();
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`fake replica ${this.name}: timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const poll = setInterval(check, 25);
      const done = () => {
        clearTimeout(timer);
        clearInterval(poll);
        this.off('request', check);
        this.off('close', check);
        this.off('finish', check);
        this.off('connectionClosed', check);
      };
      this.on('request', check);
      this.on('close', check);
      this.on('finish', check);
      this.on('connectionClosed', check);
      check();
    });
  }

  async start() {
    const handler = (req, res) => this.#handle(req, res);
    this.server = this.tls
      ? https.createServer({ key: this.tls.key, cert: this.tls.cert }, handler)
      : http.createServer(handler);
    // Long-running answers are the point of some tests: no server-side time limits.
    this.server.requestTimeout = 0;
    this.server.headersTimeout = 0;
    this.server.keepAliveTimeout = this.keepAliveTimeoutMs;
    this.server.on('connection', (socket) => {
      ++this.connections;
      socket.on('close', () => {
        this.closedSockets.add(socket);
        this.emit('connectionClosed');
      });
    });
    this.server.on('tlsClientError', (err) => {
      this.tlsErrors.push(err);
      this.emit('tlsClientError', err);
    });
    await new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, '127.0.0.1', () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.port = this.server.address().port;
    liveFakes.set(this.url, this);
    return this;
  }

  async close() {
    if (!this.server) {
      return;
    }
    this.release();
    if (liveFakes.get(this.url) === this) {
      liveFakes.delete(this.url);
    }
    const server = this.server;
    this.server = null;
    const closed = new Promise((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
  }

  #probe(req, res) {
    this.probes.push({ path: req.url, headers: { ...req.headers }, at: Date.now() });
    let body;
    if (this.healthStatus !== 200) {
      body = JSON.stringify({ error: { message: 'unhealthy', type: 'server_error', param: null, code: null } });
    } else if (req.url.split('?')[0].endsWith('/v1/models')) {
      body = JSON.stringify({ object: 'list', data: this.servedModels.map((id) => ({ id, object: 'model', created: 0, owned_by: 'fake' })) });
    } else if (req.url.split('?')[0].endsWith('/health')) {
      body = JSON.stringify({ status: 'ok' });
    } else {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end('{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":null}}');
      return;
    }
    res.writeHead(this.healthStatus, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
    this.emit('probe', req.url);
  }

  #challenge(req, res) {
    const nonce = new URL(req.url, 'http://x').searchParams.get('nonce') ?? '';
    let status = 200;
    let body;
    if (this.challengeSecret === null) {
      status = 503;
      body = { error: { message: 'not registered yet', type: 'server_error', param: null, code: null } };
    } else if (!/^[0-9a-f]{64}$/i.test(nonce)) {
      status = 400;
      body = { error: { message: 'bad nonce', type: 'invalid_request_error', param: 'nonce', code: null } };
    } else {
      body = { hmac: challengeHmac(this.challengeSecret, nonce) };
    }
    this.challenges.push({ nonce, status, at: Date.now() });
    const text = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
    this.emit('challenge', nonce);
  }

  #handle(req, res) {
    if (req.method === 'GET' && req.url.split('?')[0].endsWith('/fleetgate/v1/challenge')) {
      req.resume();
      this.#challenge(req, res);
      return;
    }
    if (req.method === 'GET') {
      req.resume();
      this.#probe(req, res);
      return;
    }
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      let json = null;
      try {
        json = JSON.parse(rawBody);
      } catch {
        json = null;
      }
      const onConnection = (this.socketRequests.get(req.socket) ?? 0) + 1;
      this.socketRequests.set(req.socket, onConnection);
      const record = {
        seq: ++this.sequence,
        onConnection,
        replica: this.name,
        method: req.method,
        path: req.url,
        headers: { ...req.headers },
        rawBody,
        json,
        receivedAt: Date.now(),
        sent: '',
        sentPlain: '',
        streamed: false,
        chunksSent: 0,
        finished: false,
        closedEarly: false,
        closedAt: null,
      };
      this.recordSockets.set(record, req.socket);
      this.requests.push(record);
      ++this.inFlight;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      let counted = true;
      const leave = () => {
        if (counted) {
          counted = false;
          --this.inFlight;
        }
      };
      record.leave = leave;
      res.on('close', () => {
        if (!record.finished) {
          record.closedEarly = true;
          record.closedAt = Date.now();
          leave();
          this.emit('close', record);
        }
      });
      this.emit('request', record);
      const mode = { ...this.mode, ...(json && typeof json.fake === 'object' && json.fake ? json.fake : {}) };
      this.#respond(req, res, record, mode).catch((err) => {
        leave();
        res.destroy(err);
      });
    });
  }

  #finish(res, record, lastBytes) {
    record.leave();
    record.finished = true;
    if (lastBytes !== undefined) {
      record.sent += lastBytes;
    }
    if (!record.streamed) {
      record.sentPlain = record.sent;
    }
    res.end(lastBytes);
    this.emit('finish', record);
  }

  // True when the gateway already closed this request's connection.
  #gone(res) {
    return res.destroyed || res.socket === null || res.socket?.destroyed;
  }

  async #respond(req, res, record, mode) {
    if (mode.type === 'hang') {
      return;
    }
    if (mode.type === 'hold') {
      await new Promise((resolve) => this.holds.push(resolve));
      mode = { ...mode, type: 'auto' };
    }
    if (mode.delayMs > 0) {
      await sleep(mode.delayMs);
    }
    if (this.#gone(res)) {
      return;
    }
    const body = record.json ?? {};
    const wantsStream = body.stream === true;
    let type = mode.type;
    if (type === 'auto') {
      type = wantsStream ? 'stream' : 'json';
    }
    switch (type) {
      case 'status':
        return this.#status(res, record, mode);
      case 'json':
        return this.#json(res, record, mode, req.url);
      case 'partial':
        return this.#partial(res, record, mode, req.url);
      case 'stream':
        return this.#stream(res, record, mode, req.url, Infinity);
      case 'break':
        return this.#stream(res, record, mode, req.url, mode.afterChunks);
      case 'interim':
        return this.#interim(req, res, record, mode, wantsStream);
      case 'trailing':
        return this.#trailing(res, record, mode, req.url);
      case 'endlessLine':
        return this.#endlessLine(res, record, mode);
      case 'reset':
        return this.#reset(req, res, record, mode, wantsStream);
      default:
        throw new Error(`unknown fake mode ${type}`);
    }
  }

  async #interim(req, res, record, mode, wantsStream) {
    for (const code of mode.interim ?? [100, 102, 103]) {
      if (code === 100) {
        res.writeContinue();
      } else if (code === 102) {
        res.writeProcessing();
      } else if (code === 103) {
        res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
      } else {
        res.socket.write(`HTTP/1.1 ${code} Interim\r\n\r\n`);
      }
    }
    return wantsStream ? this.#stream(res, record, mode, req.url, Infinity) : this.#json(res, record, mode, req.url);
  }

  // A whole answer no request asked for: a gateway that reuses this connection would take it as
  // the answer to its next request.
  static SMUGGLED = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{"smuggled":true}';

  #trailing(res, record, mode, path) {
    const body = this.answerBody(record, path, mode);
    const socket = res.socket;
    res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(body) });
    record.leave();
    record.finished = true;
    record.sent = body;
    record.sentPlain = body;
    res.end(body, () => {
      socket.write(mode.trailing ?? FakeReplica.SMUGGLED, () => {
        record.trailingSent = true;
        this.emit('trailing', record);
      });
    });
    this.emit('finish', record);
  }

  async #endlessLine(res, record, mode) {
    res.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache' });
    record.streamed = true;
    const piece = 'x'.repeat(16 * 1024);
    const max = mode.maxBytes ?? 64 * 1024 * 1024;
    let written = 0;
    res.write('data: ');
    while (written < max) {
      if (this.#gone(res)) {
        return;
      }
      ++record.chunksSent;
      written += piece.length;
      if (!res.write(piece)) {
        await new Promise((resolve) => {
          const done = () => {
            res.off('drain', done);
            res.off('close', done);
            resolve();
          };
          res.on('drain', done);
          res.on('close', done);
        });
      }
    }
    this.#finish(res, record, '\n\n');
  }

  async #reset(req, res, record, mode, wantsStream) {
    if (mode.onlyReused && record.onConnection === 1) {
      return wantsStream ? this.#stream(res, record, mode, req.url, Infinity) : this.#json(res, record, mode, req.url);
    }
    if (mode.afterMs > 0) {
      await sleep(mode.afterMs);
    }
    record.leave();
    record.finished = true;
    record.reset = true;
    res.socket?.destroy();
    this.emit('finish', record);
  }

  #status(res, record, mode) {
    const status = mode.status ?? 500;
    const body =
      mode.body ??
      JSON.stringify({
        error: { message: `fake ${this.name} answers ${status}`, type: 'server_error', param: null, code: null },
      });
    const headers = { 'Content-Type': mode.contentType ?? 'application/json', 'Content-Length': Buffer.byteLength(body) };
    Object.assign(headers, mode.headers ?? {});
    res.writeHead(status, headers);
    this.#finish(res, record, body);
  }

  // A JSON answer for the path; spacing and field order are deliberately unusual so that a gateway
  // that re-serialises instead of relaying would be caught.
  answerBody(record, path, mode) {
    const n = record.seq;
    const model = record.json?.model ?? 'unknown';
    const usage = mode.usage === false ? undefined : { prompt_tokens: 7000 + n, completion_tokens: 5, total_tokens: 7005 + n };
    let doc;
    if (path.endsWith('/embeddings')) {
      const input = record.json?.input;
      const count = Array.isArray(input) ? input.length : 1;
      const data = [];
      for (let i = 0; i < count; ++i) {
        const vector = [0.25 + i, -0.5, 0.125, n];
        data.push({
          object: 'embedding',
          index: i,
          embedding: record.json?.encoding_format === 'base64' ? floatsToBase64(vector) : vector,
        });
      }
      doc = { object: 'list', data, model, usage: usage && { prompt_tokens: usage.prompt_tokens, total_tokens: usage.prompt_tokens } };
    } else if (path.endsWith('/completions') && !path.endsWith('/chat/completions')) {
      doc = {
        id: `cmpl-${this.name}-${n}`,
        object: 'text_completion',
        created: 1700000000 + n,
        model,
        choices: [{ text: ` RISK_LEVEL: ${n % 10} from ${this.name}`, index: 0, logprobs: null, finish_reason: 'stop' }],
        usage,
      };
    } else {
      doc = {
        id: `chatcmpl-${this.name}-${n}`,
        object: 'chat.completion',
        created: 1700000000 + n,
        model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: `RISK_LEVEL: ${n % 10} — réponse ${this.name} #${n} ✓` },
            finish_reason: 'stop',
          },
        ],
        usage,
      };
    }
    // Two-space indentation and a trailing newline: not what a JSON library would produce.
    return JSON.stringify(doc, null, 2) + '\n';
  }

  async #json(res, record, mode, path) {
    const body = mode.body ?? this.answerBody(record, path, mode);
    if (mode.chunked) {
      // No Content-Length: the body goes out in pieces with chunked transfer encoding.
      res.writeHead(mode.status ?? 200, { 'Content-Type': mode.contentType ?? 'application/json; charset=utf-8' });
      const cut = [0, Math.floor(body.length / 3), Math.floor((2 * body.length) / 3), body.length];
      for (let i = 0; i < 2; ++i) {
        const piece = body.slice(cut[i], cut[i + 1]);
        record.sent += piece;
        res.write(piece);
        await sleep(mode.intervalMs);
        if (this.#gone(res)) {
          return;
        }
      }
      this.#finish(res, record, body.slice(cut[2]));
      return;
    }
    res.writeHead(mode.status ?? 200, {
      'Content-Type': mode.contentType ?? 'application/json; charset=utf-8',
      'Content-Length': Buffer.byteLength(body),
      'X-Fake-Replica': this.name,
    });
    this.#finish(res, record, body);
  }

  #partial(res, record, mode, path) {
    const body = this.answerBody(record, path, mode);
    res.writeHead(200, {
      'Content-Type': 'application/json; charset=utf-8',
      'Content-Length': Buffer.byteLength(body),
    });
    const half = body.slice(0, Math.floor(body.length / 2));
    record.sent += half;
    record.sentPlain = record.sent;
    res.write(half, () => {
      setTimeout(() => {
        record.leave();
        record.finished = true;
        res.socket?.destroy();
        this.emit('finish', record);
      }, 30);
    });
  }

  // An OpenAI-shaped stream: one SSE event per chunk, `intervalMs` apart, a finish chunk, then
  // data: [DONE]. As with OpenAI, usage comes only when the request says
  // "stream_options": {"include_usage": true}: then every chunk carries "usage":null and a
  // usage-only chunk ("choices": []) precedes [DONE]. `record.sent` is what went out;
  // `record.sentPlain` is what would have gone out without include_usage (what a client that did
  // not ask for usage must receive if the gateway asked on its behalf). With a finite `limit`,
  // the socket is destroyed after that many content events (a phone dying mid-answer).
  async #stream(res, record, mode, path, limit) {
    res.writeHead(200, {
      'Content-Type': mode.contentType ?? 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache',
      'X-Fake-Replica': this.name,
    });
    res.flushHeaders();
    record.streamed = true;
    if (mode.firstChunkDelayMs > 0) {
      await sleep(mode.firstChunkDelayMs);
    }
    const n = record.seq;
    const model = record.json?.model ?? 'unknown';
    const isChat = path.endsWith('/chat/completions');
    const withUsage = record.json?.stream_options?.include_usage === true && mode.usage !== false;
    const total = mode.chunks;
    const head = isChat
      ? { id: `chatcmpl-${this.name}-${n}`, object: 'chat.completion.chunk', created: 1700000000 + n, model, system_fingerprint: 'fp_fake' }
      : { id: `cmpl-${this.name}-${n}`, object: 'text_completion', created: 1700000000 + n, model };
    // Both renderings of one event.
    const event = (choices, usage) => ({
      real: `data: ${JSON.stringify(withUsage ? { ...head, choices, usage } : { ...head, choices })}\n\n`,
      plain: `data: ${JSON.stringify({ ...head, choices })}\n\n`,
    });
    const die = () => {
      record.leave();
      record.finished = true;
      res.socket.destroy();
      this.emit('finish', record);
    };
    for (let i = 0; i < total; ++i) {
      if (i > 0 && mode.intervalMs > 0) {
        await sleep(mode.intervalMs);
      }
      if (this.#gone(res)) {
        return;
      }
      if (i >= limit) {
        die();
        return;
      }
      const piece = `tok${i}-${this.name} `;
      const choices = isChat
        ? [{ index: 0, delta: i === 0 ? { role: 'assistant', content: piece } : { content: piece }, logprobs: null, finish_reason: null }]
        : [{ text: piece, index: 0, logprobs: null, finish_reason: null }];
      const e = event(choices, null);
      record.sent += e.real;
      record.sentPlain += e.plain;
      ++record.chunksSent;
      res.write(e.real);
      this.emit('chunk', record);
    }
    if (limit !== Infinity) {
      // afterChunks >= chunks: die right before the final events.
      die();
      return;
    }
    const finish = event(
      isChat ? [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] : [{ text: '', index: 0, logprobs: null, finish_reason: 'stop' }],
      null,
    );
    let tail = finish.real;
    let tailPlain = finish.plain;
    if (withUsage) {
      const usage = { prompt_tokens: 7000 + n, completion_tokens: total, total_tokens: 7000 + n + total };
      tail += `data: ${JSON.stringify({ ...head, choices: [], usage })}\n\n`;
    }
    tail += 'data: [DONE]\n\n';
    tailPlain += 'data: [DONE]\n\n';
    if (mode.intervalMs > 0) {
      await sleep(mode.intervalMs);
    }
    if (this.#gone(res)) {
      return;
    }
    record.sentPlain += tailPlain;
    this.#finish(res, record, tail);
  }
}

export async function startFakeReplica(options = {}) {
  const fake = new FakeReplica(options);
  await fake.start();
  return fake;
}

// A URL on 127.0.0.1 where nothing listens (connections are refused): bind port 0, note the port,
// close it. Another process could take the port meanwhile, which is unlikely within one test.
export async function closedPortUrl() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}
