// A hostile fake phone for the chaos suite: a raw TCP server on 127.0.0.1 port 0 that speaks just
// enough HTTP/1.1 to be a replica, and misbehaves in the way its mode says. Raw, not node:http,
// because several modes (garbage, trickled heads, 1xx, resets) are not what an HTTP server
// library lets one write.
//
// Modes (setMode(type, options)), applied to requests (POST); probes (GET) are answered healthy
// unless the mode is about probes:
//
//   healthy        a JSON answer (Content-Length), or an SSE stream of 3 events and [DONE]
//   hangAfterHead  a 200 head (JSON with a Content-Length, or an event stream), then nothing
//   trickle        a 200 head, then the answer one byte per `everyMs` (default 1000 ms)
//   garbage        bytes that are not HTTP at all, then the connection is closed
//   interim        `interim` (default 100, 102, 103) interim answers, then like healthy
//   endlessEvent   an event stream: `data: ` and then bytes with no line end, as fast as the
//                  gateway reads, until it closes the connection
//   hugeEvent      an event stream whose first event is `bytes` long (default 100 MB), then
//                  [DONE]; non-streamed: a JSON answer of that size (Content-Length)
//   resetMidStream an event stream of `afterEvents` (default 2) events, then a TCP reset
//                  (non-streamed: half a body, then a reset)
//   flap5xx        answers alternate: `status` (default cycles 500, 502, 503), then healthy
//   firehose       not hostile: a well-formed stream of small events without end, as fast as the
//                  gateway reads (a very long answer; for clients that stop reading)
//   nestedJson     a JSON answer (or a stream's usage event) whose usage nests `depth` (default
//                  100k) levels deep
//   wrongModel     healthy answers, but the probes name `served` (default "another-model"): on
//                  /health as an agent's {"model": ...}, on /v1/models as data[].id
//
// It counts requests in flight (a POST whose body is complete, until its answer was written or
// its connection ended: end, error or close) and the most it ever held at once (maxInFlight), to
// check the gateway never gives a phone more than its slots. In flight ends *before* the last
// byte of a complete answer is written, so a gateway that frees the slot on that byte cannot be
// seen as over-committing.

import net from 'node:net';

const CHAT_HEAD = { id: 'chatcmpl-chaos', object: 'chat.completion.chunk', created: 1700000000, system_fingerprint: 'fp_chaos' };

function chatJson(model, n) {
  return JSON.stringify({
    id: `chatcmpl-chaos-${n}`,
    object: 'chat.completion',
    created: 1700000000,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: `RISK_LEVEL: ${n % 10}` }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
  });
}

function sseEvents(model, count) {
  let out = '';
  for (let i = 0; i < count; ++i) {
    const delta = i === 0 ? { role: 'assistant', content: `tok${i} ` } : { content: `tok${i} ` };
    out += `data: ${JSON.stringify({ ...CHAT_HEAD, model, choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
  }
  return out;
}

function sseTail(model) {
  return `data: ${JSON.stringify({ ...CHAT_HEAD, model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`;
}

const JSON_HEAD = (length) => `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;
const SSE_HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n';
const SSE_CHUNKED_HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n';

export class HostilePhone {
  constructor({ name = 'hostile', model = 'm' } = {}) {
    this.name = name;
    this.model = model;
    this.mode = { type: 'healthy' };
    this.inFlight = 0;
    this.maxInFlight = 0;
    this.requests = 0; // POSTs whose body was complete
    this.probes = 0;
    this.sequence = 0;
    this.sockets = new Set();
    this.server = null;
    this.port = 0;
    this.flapCount = 0;
  }

  get url() {
    return `http://127.0.0.1:${this.port}`;
  }

  setMode(type, options = {}) {
    this.mode = { type, ...options };
  }

  // Forgets the counts of the previous scenario (not maxInFlight's meaning: the most at once
  // since this call).
  resetCounts() {
    this.requests = 0;
    this.maxInFlight = this.inFlight;
  }

  async start() {
    this.server = net.createServer((socket) => this.#connection(socket));
    await new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, '127.0.0.1', () => resolve());
    });
    this.port = this.server.address().port;
    return this;
  }

  async close() {
    if (!this.server) {
      return;
    }
    const server = this.server;
    this.server = null;
    const closed = new Promise((resolve) => server.close(() => resolve()));
    for (const s of this.sockets) {
      s.destroy();
    }
    await closed;
  }

  #connection(socket) {
    this.sockets.add(socket);
    socket.setNoDelay(true);
    let buffer = Buffer.alloc(0);
    let busy = false; // one request at a time per connection (no pipelining from the gateway)
    const state = { ended: false, onEnd: [] };
    const ended = () => {
      if (!state.ended) {
        state.ended = true;
        for (const f of state.onEnd.splice(0)) {
          f();
        }
      }
    };
    socket.on('end', ended);
    socket.on('error', ended);
    socket.on('close', () => {
      this.sockets.delete(socket);
      ended();
    });
    const pump = () => {
      if (busy || state.ended) {
        return;
      }
      const headEnd = buffer.indexOf('\r\n\r\n');
      if (headEnd < 0) {
        if (buffer.length > 64 * 1024) {
          socket.destroy();
        }
        return;
      }
      const head = buffer.subarray(0, headEnd).toString('latin1');
      const lines = head.split('\r\n');
      const [method, target] = lines[0].split(' ');
      const headers = {};
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(':');
        if (colon > 0) {
          headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
        }
      }
      const length = Number(headers['content-length'] ?? 0);
      if (buffer.length < headEnd + 4 + length) {
        return;
      }
      const body = buffer.subarray(headEnd + 4, headEnd + 4 + length).toString('utf8');
      buffer = buffer.subarray(headEnd + 4 + length);
      busy = true;
      const next = () => {
        busy = false;
        setImmediate(pump);
      };
      if (method === 'GET') {
        this.#probe(socket, target, next);
      } else {
        this.#request(socket, state, target, body, next).catch(() => socket.destroy());
      }
    };
    socket.on('data', (d) => {
      buffer = Buffer.concat([buffer, d]);
      pump();
    });
  }

  #probe(socket, target, next) {
    ++this.probes;
    const path = target.split('?')[0];
    const served = this.mode.type === 'wrongModel' ? (this.mode.served ?? 'another-model') : this.model;
    let body;
    if (path.endsWith('/v1/models')) {
      body = JSON.stringify({ object: 'list', data: [{ id: served, object: 'model', created: 0, owned_by: 'chaos' }] });
    } else {
      body = JSON.stringify({ status: 'ok', model: served });
    }
    socket.write(JSON_HEAD(Buffer.byteLength(body)) + body, next);
  }

  async #request(socket, state, target, body, next) {
    const n = ++this.sequence;
    ++this.requests;
    ++this.inFlight;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    let counted = true;
    const leave = () => {
      if (counted) {
        counted = false;
        --this.inFlight;
      }
    };
    if (state.ended) {
      leave();
      return;
    }
    state.onEnd.push(leave);
    let json = null;
    try {
      json = JSON.parse(body);
    } catch {
      json = null;
    }
    const stream = json?.stream === true;
    const model = typeof json?.model === 'string' ? json.model : this.model;
    const gone = () => state.ended || socket.destroyed;
    // Writes with back-pressure; false once the connection is gone.
    const write = (bytes) =>
      new Promise((resolve) => {
        if (gone()) {
          resolve(false);
          return;
        }
        if (socket.write(bytes)) {
          resolve(true);
          return;
        }
        const done = () => {
          socket.off('drain', done);
          state.onEnd = state.onEnd.filter((f) => f !== done);
          resolve(!gone());
        };
        socket.on('drain', done);
        state.onEnd.push(done);
      });
    const sleep = (ms) =>
      new Promise((resolve) => {
        const timer = setTimeout(finish, ms);
        function finish() {
          clearTimeout(timer);
          state.onEnd = state.onEnd.filter((f) => f !== finish);
          resolve();
        }
        state.onEnd.push(finish);
      });
    // A complete answer: in flight ends before its last byte.
    const answer = async (text) => {
      if (text.length > 1 && !(await write(text.slice(0, -1)))) {
        return;
      }
      leave();
      await write(text.slice(-1));
      next();
    };
    const healthy = () => {
      if (stream) {
        return answer(SSE_CHUNKED_HEAD + chunked(sseEvents(model, 3) + sseTail(model)));
      }
      const doc = chatJson(model, n);
      return answer(JSON_HEAD(Buffer.byteLength(doc)) + doc);
    };
    const mode = this.mode;
    switch (mode.type) {
      case 'healthy':
      case 'wrongModel':
        return healthy();
      case 'hangAfterHead':
        await write(stream ? SSE_HEAD : JSON_HEAD(1000));
        return; // until the gateway closes it
      case 'trickle': {
        const doc = stream ? sseEvents(model, 3) + sseTail(model) : chatJson(model, n);
        if (!(await write(stream ? SSE_HEAD : JSON_HEAD(Buffer.byteLength(doc))))) {
          return;
        }
        for (const ch of doc) {
          await sleep(mode.everyMs ?? 1000);
          if (!(await write(ch))) {
            return;
          }
        }
        leave();
        socket.end();
        return;
      }
      case 'garbage':
        await write(mode.bytes ?? '\x00\xffSSH-2.0-not-http\r\n\r\n{"choices":[]}\r\nHTTP/1.1 200 OK\r\n\r\n');
        leave();
        socket.end();
        return;
      case 'interim': {
        let text = '';
        for (const code of mode.interim ?? [100, 102, 103]) {
          text += code === 103 ? 'HTTP/1.1 103 Early Hints\r\nLink: </x.css>; rel=preload\r\n\r\n' : `HTTP/1.1 ${code} Interim\r\n\r\n`;
        }
        if (!(await write(text))) {
          return;
        }
        return healthy();
      }
      case 'endlessEvent': {
        if (!(await write(`${SSE_HEAD}data: `))) {
          return;
        }
        const piece = 'x'.repeat(64 * 1024);
        while (await write(piece)) {
          // as fast as the gateway reads
        }
        return;
      }
      case 'hugeEvent': {
        const total = mode.bytes ?? 100 * 1000 * 1000;
        const piece = 'x'.repeat(64 * 1024);
        if (stream) {
          if (!(await write(`${SSE_HEAD}data: `))) {
            return;
          }
        } else if (!(await write(`${JSON_HEAD(total + 14)}{"content":"`))) {
          return;
        }
        for (let sent = 0; sent < total; sent += piece.length) {
          if (!(await write(sent + piece.length <= total ? piece : piece.slice(0, total - sent)))) {
            return;
          }
        }
        leave();
        await write(stream ? `\n\n${sseTail(model)}` : '"}');
        socket.end();
        return;
      }
      case 'firehose': {
        if (!(await write(SSE_HEAD))) {
          return;
        }
        const events = sseEvents(model, 200);
        while (await write(events)) {
          // as fast as the gateway reads
        }
        return;
      }
      case 'nestedJson': {
        const depth = mode.depth ?? 100000;
        const usage = `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
        if (stream) {
          const tail = `data: {"id":"x","object":"chat.completion.chunk","model":"${model}","choices":[],"usage":${usage}}\n\n`;
          return answer(SSE_CHUNKED_HEAD + chunked(sseEvents(model, 2) + tail + sseTail(model)));
        }
        const doc = `{"id":"x","object":"chat.completion","model":"${model}","choices":[],"usage":${usage}}`;
        return answer(JSON_HEAD(Buffer.byteLength(doc)) + doc);
      }
      case 'resetMidStream': {
        if (stream) {
          await write(SSE_HEAD + sseEvents(model, mode.afterEvents ?? 2));
        } else {
          const doc = chatJson(model, n);
          await write(JSON_HEAD(Buffer.byteLength(doc)) + doc.slice(0, doc.length / 2));
        }
        leave();
        socket.resetAndDestroy();
        return;
      }
      case 'flap5xx': {
        const statuses = mode.statuses ?? [500, 502, 503];
        const turn = this.flapCount++;
        if (turn % 2 === 1) {
          return healthy();
        }
        const status = statuses[(turn / 2) % statuses.length];
        const doc = JSON.stringify({ error: { message: `chaos ${status}`, type: 'server_error', param: null, code: null } });
        return answer(`HTTP/1.1 ${status} Flap\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(doc)}\r\n\r\n${doc}`);
      }
      default:
        throw new Error(`unknown hostile mode ${mode.type}`);
    }
  }
}

// A whole body in chunked transfer encoding, ending with the last chunk (keeps the connection
// reusable without a Content-Length).
function chunked(text) {
  return `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n0\r\n\r\n`;
}

export async function startHostilePhone(options) {
  return new HostilePhone(options).start();
}
