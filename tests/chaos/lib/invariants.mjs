// The invariants the chaos suite asserts, and the checker that runs beside the attacks.
//
// - terminalAnswer(): one request on its own raw connection (Connection: close), read to the
//   end; it must get exactly one terminal answer: a final status (never a relayed 1xx) with a
//   complete body (Content-Length or chunked, and no byte after it), a JSON body for JSON
//   answers (OpenAI error shape for errors), or an event stream whose last event is [DONE] (an
//   error event may come just before it), exactly one [DONE] and nothing after it; and it must
//   come before the deadline (routing.request_timeout plus a grace for a loaded machine).
// - Watch: while a scenario runs, samples the gateway's resident memory (VmRSS of
//   /proc/PID/status) every 50 ms, checks the process is alive, sends a control client's
//   requests (one kept-alive connection opened before the attacks, streamed and not, in turn)
//   to a model served by healthy phones, and reads /admin/v1/replicas and /admin/v1/fleet to see
//   that the healthy phones stay healthy. checkpoint(name) ends the scenario: /healthz answers,
//   the control client was served all along, no healthy phone left `healthy`, the RSS peak is
//   within the bound; it records the peak for the scenario (printed at the end of the file).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';

import { request } from '../../integration/lib/gateway.mjs';
import { SANITIZE } from '../../integration/lib/sanitize.mjs';

export const MiB = 1024 * 1024;
// The bound on the gateway's resident memory through every chaos scenario (docs/operations.md).
// Under ./fleet test --sanitize the gateway is an ASan build: shadow memory and the quarantine of
// freed blocks (256 MiB by default) come on top, and the 40 x 4 MiB bodies scenario measured 644 MiB
// there: the sanitized bound only catches runaway growth; the Release run holds the real bound.
export const RSS_BOUND = SANITIZE ? 1536 * MiB : 96 * MiB;

// Parses one HTTP/1.1 response at the start of buf (a latin1 string). Returns null when it is
// not complete yet; {status, headers, body, consumed, untilClose} otherwise. `closed`: the peer
// closed, so a body without a length ends here. Throws on bytes that are not a response.
export function parseResponse(buf, { closed = false } = {}) {
  const headEnd = buf.indexOf('\r\n\r\n');
  if (headEnd < 0) {
    if (closed && buf.length > 0) {
      throw new Error(`the connection closed within a response head: ${JSON.stringify(buf.slice(0, 120))}`);
    }
    return null;
  }
  const lines = buf.slice(0, headEnd).split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(lines[0]);
  if (!m) {
    throw new Error(`not an HTTP response: ${JSON.stringify(lines[0].slice(0, 120))}`);
  }
  const status = Number(m[1]);
  const headers = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) {
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
  }
  let pos = headEnd + 4;
  if (status >= 100 && status < 200) {
    return { status, headers, body: '', consumed: pos, untilClose: false };
  }
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    let body = '';
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', pos);
      if (lineEnd < 0) {
        return null;
      }
      const size = parseInt(buf.slice(pos, lineEnd), 16);
      if (Number.isNaN(size)) {
        throw new Error(`a bad chunk size line: ${JSON.stringify(buf.slice(pos, lineEnd + 2).slice(0, 40))}`);
      }
      if (size === 0) {
        const end = buf.indexOf('\r\n\r\n', lineEnd);
        if (end < 0) {
          return null;
        }
        return { status, headers, body, consumed: end + 4, untilClose: false };
      }
      if (buf.length < lineEnd + 2 + size + 2) {
        return null;
      }
      body += buf.slice(lineEnd + 2, lineEnd + 2 + size);
      pos = lineEnd + 2 + size + 2;
    }
  }
  if (headers['content-length'] !== undefined) {
    const length = Number(headers['content-length']);
    if (buf.length < pos + length) {
      return null;
    }
    return { status, headers, body: buf.slice(pos, pos + length), consumed: pos + length, untilClose: false };
  }
  if (status === 204 || status === 304) {
    return { status, headers, body: '', consumed: pos, untilClose: false };
  }
  // No length: the body runs to the close.
  return closed ? { status, headers, body: buf.slice(pos), consumed: buf.length, untilClose: true } : null;
}

// The data events of an SSE body, and its comments, in order.
function sseEvents(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        events.push({ comment: line });
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
    }
    if (data.length > 0) {
      events.push({ data: data.join('\n') });
    }
  }
  return events;
}

// What is wrong with a whole answer (an empty list when nothing is).
export function answerViolations(res) {
  const problems = [];
  const type = res.headers['content-type'] ?? '';
  const body = Buffer.from(res.body, 'latin1').toString('utf8');
  if (/text\/event-stream/.test(type)) {
    const events = sseEvents(body);
    const dones = events.filter((e) => e.data === '[DONE]').length;
    const last = events.length - 1;
    const lastData = events.map((e) => e.data !== undefined).lastIndexOf(true);
    if (dones !== 1) {
      problems.push(`a stream with ${dones} [DONE] events`);
    } else if (events[last].data !== '[DONE]') {
      problems.push(`bytes after [DONE]: ${JSON.stringify(events.slice(lastData + 1)).slice(0, 120)}`);
    }
    const errors = events.filter((e) => e.data !== undefined && e.data !== '[DONE]' && safeJson(e.data)?.error);
    if (errors.length > 1) {
      problems.push(`${errors.length} error events in one stream`);
    }
    for (const e of events) {
      if (e.data !== undefined && e.data !== '[DONE]' && safeJson(e.data) === undefined) {
        problems.push(`an event that is not JSON: ${JSON.stringify(e.data.slice(0, 80))}`);
        break;
      }
    }
  } else if (/json/.test(type)) {
    const doc = safeJson(body);
    if (doc === undefined) {
      problems.push(`a JSON answer that does not parse (${body.length} bytes): ${JSON.stringify(body.slice(0, 80))}`);
    } else if (res.status >= 400) {
      const e = doc?.error;
      if (!e || typeof e.message !== 'string' || typeof e.type !== 'string' || !('code' in e)) {
        problems.push(`status ${res.status} without an OpenAI error body: ${body.slice(0, 120)}`);
      }
    }
  }
  if (res.status < 200) {
    problems.push(`a final answer with status ${res.status}`);
  }
  return problems;
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

// One request on its own connection with `Connection: close`, read until the gateway closes it
// or the deadline. Resolves with {status, headers, body, violations, ms}; never rejects for the
// gateway's behaviour (the violations say what was wrong). `pause` leaves the answer unread.
export function terminalAnswer(baseUrl, path, body, { method = 'POST', headers = {}, deadlineMs, localAddress } = {}) {
  const { hostname, port } = new URL(baseUrl);
  const payload = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
  let head = `${method} ${path} HTTP/1.1\r\nHost: chaos\r\nConnection: close\r\n`;
  if (payload) {
    head += `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n`;
  }
  for (const [k, v] of Object.entries(headers)) {
    head += `${k}: ${v}\r\n`;
  }
  const started = Date.now();
  return new Promise((resolve) => {
    const socket = net.connect({ host: hostname, port: Number(port), localAddress });
    let received = '';
    let settled = false;
    const finish = (closed, extra = []) => {
      if (settled) {
        return;
      }
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const out = { status: 0, headers: {}, body: '', violations: [...extra], ms: Date.now() - started, received: received.length };
      try {
        const res = parseResponse(received, { closed: true });
        if (!res) {
          out.violations.push(received.length === 0 ? 'no answer at all' : `an incomplete answer: ${JSON.stringify(received.slice(0, 160))}`);
        } else {
          Object.assign(out, { status: res.status, headers: res.headers, body: res.body });
          if (res.consumed < received.length) {
            out.violations.push(`${received.length - res.consumed} bytes after the answer: ${JSON.stringify(received.slice(res.consumed, res.consumed + 80))}`);
          }
          out.violations.push(...answerViolations(res));
        }
      } catch (e) {
        out.violations.push(e.message);
      }
      if (!closed) {
        out.violations.push(`no terminal answer within ${deadlineMs} ms (a hang past routing.request_timeout)`);
      }
      resolve(out);
    };
    const timer = setTimeout(() => finish(false), deadlineMs);
    socket.setEncoding('latin1');
    socket.on('data', (d) => {
      received += d;
    });
    socket.on('error', () => {});
    socket.on('close', () => finish(true));
    socket.on('connect', () => socket.write(head + '\r\n' + payload));
  });
}

// Asserts a list of terminal answers had no violation, naming the first ones.
export function assertAllTerminal(results, what) {
  const bad = results.filter((r) => r.violations.length > 0);
  assert.deepEqual(
    bad.slice(0, 5).map((r) => ({ status: r.status, ms: r.ms, violations: r.violations })),
    [],
    `${what}: ${bad.length} of ${results.length} requests did not get exactly one terminal answer`,
  );
}

export function rssBytes(pid) {
  const text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+) kB/m.exec(text);
  return m ? Number(m[1]) * 1024 : 0;
}

// A client on one kept-alive raw connection: request() sends one request and resolves with its
// parsed answer (or rejects when the connection closes first or the deadline passes).
export class KeepAliveClient {
  constructor(baseUrl) {
    this.baseUrl = baseUrl;
    this.socket = null;
    this.buffer = '';
    this.waiter = null;
    this.reconnects = -1;
  }

  async connect() {
    const { hostname, port } = new URL(this.baseUrl);
    await new Promise((resolve, reject) => {
      const socket = net.connect({ host: hostname, port: Number(port) });
      socket.setEncoding('latin1');
      socket.once('connect', () => resolve());
      socket.once('error', reject);
      socket.on('error', () => {});
      socket.on('data', (d) => {
        this.buffer += d;
        this.waiter?.check(false);
      });
      socket.on('close', () => {
        if (this.socket === socket) {
          this.socket = null;
        }
        this.waiter?.check(true);
      });
      this.socket = socket;
    });
    this.buffer = '';
    ++this.reconnects;
  }

  get connected() {
    return this.socket !== null && !this.socket.destroyed;
  }

  async request(path, body, { deadlineMs = 10000 } = {}) {
    if (!this.connected) {
      await this.connect();
    }
    const payload = JSON.stringify(body);
    const socket = this.socket;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        socket.destroy();
        reject(new Error(`no answer within ${deadlineMs} ms`));
      }, deadlineMs);
      this.waiter = {
        check: (closed) => {
          let res;
          try {
            res = parseResponse(this.buffer, { closed });
          } catch (e) {
            clearTimeout(timer);
            this.waiter = null;
            socket.destroy();
            reject(e);
            return;
          }
          if (res) {
            clearTimeout(timer);
            this.waiter = null;
            this.buffer = this.buffer.slice(res.consumed);
            if (/close/i.test(res.headers.connection ?? '') || res.untilClose) {
              socket.destroy();
            }
            resolve(res);
          } else if (closed) {
            clearTimeout(timer);
            this.waiter = null;
            reject(new Error(`the connection closed before the answer (${this.buffer.length} bytes)`));
          }
        },
      };
      socket.write(`POST ${path} HTTP/1.1\r\nHost: chaos\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
    });
  }

  close() {
    this.socket?.destroy();
  }
}

export class Watch {
  // gw: a Gateway (lib/gateway.mjs); healthy: [{url, model}] phones that must stay healthy;
  // control: {model} served by healthy phones; adminHeaders for the admin API;
  // rssBoundBytes: the bound asserted at every checkpoint.
  constructor({ gw, healthy, control, adminHeaders = {}, rssBoundBytes, deadlineMs = 15000 }) {
    this.gw = gw;
    this.healthy = healthy;
    this.control = control;
    this.adminHeaders = adminHeaders;
    this.rssBoundBytes = rssBoundBytes;
    this.deadlineMs = deadlineMs;
    this.peaks = []; // [{scenario, peakMiB, control}]
    this.client = new KeepAliveClient(gw.publicUrl);
    this.stopped = false;
    this.loops = [];
    this.#resetScenario('(start)');
  }

  #resetScenario(name) {
    this.scenario = name;
    this.peak = 0;
    this.controlOk = 0;
    this.controlFailures = [];
    this.healthFailures = [];
    this.died = null;
  }

  async start() {
    await this.client.connect();
    this.loops.push(this.#rssLoop(), this.#controlLoop(), this.#fleetLoop());
    return this;
  }

  begin(name) {
    this.#resetScenario(name);
  }

  async #rssLoop() {
    while (!this.stopped) {
      if (!this.gw.running) {
        this.died ??= `the gateway exited (code ${this.gw.exitCode}, signal ${this.gw.signal})`;
      } else {
        try {
          this.peak = Math.max(this.peak, rssBytes(this.gw.pid));
        } catch {
          // exiting
        }
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async #controlLoop() {
    let n = 0;
    while (!this.stopped) {
      const stream = n++ % 2 === 1;
      const body = { model: this.control.model, stream, messages: [{ role: 'user', content: `control ${n}` }] };
      try {
        const res = await this.client.request('/v1/chat/completions', body, { deadlineMs: this.deadlineMs });
        const problems = answerViolations(res);
        if (res.status !== 200) {
          problems.push(`status ${res.status}: ${res.body.slice(0, 120)}`);
        }
        if (stream && !res.body.includes('[DONE]')) {
          problems.push('a control stream without [DONE]');
        }
        if (problems.length > 0) {
          this.controlFailures.push(problems.join('; '));
        } else {
          ++this.controlOk;
        }
      } catch (e) {
        if (!this.stopped) {
          this.controlFailures.push(e.message);
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async #fleetLoop() {
    while (!this.stopped) {
      try {
        const list = await request(`${this.gw.adminUrl}/admin/v1/replicas`, { headers: this.adminHeaders, timeoutMs: 5000 });
        for (const phone of this.healthy) {
          const r = list.json?.replicas?.find((x) => x.url === phone.url);
          if (!r || r.state !== 'healthy') {
            this.healthFailures.push(`${phone.url} is ${r?.state ?? 'missing'} (${r?.last_probe_error ?? ''})`);
          }
        }
        const fleet = await request(`${this.gw.adminUrl}/admin/v1/fleet`, { headers: this.adminHeaders, timeoutMs: 5000 });
        const expected = new Map();
        for (const phone of this.healthy) {
          expected.set(phone.model, (expected.get(phone.model) ?? 0) + 1);
        }
        for (const [model, count] of expected) {
          const m = fleet.json?.models?.find((x) => x.model === model);
          if (!m || m.healthy < count) {
            this.healthFailures.push(`/admin/v1/fleet shows ${m?.healthy} healthy replicas of ${model}, not ${count}`);
          }
        }
      } catch (e) {
        if (!this.stopped) {
          this.healthFailures.push(`the admin API did not answer: ${e.message}`);
        }
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  // Ends the scenario: asserts the invariants over it, records its RSS peak.
  async checkpoint(name = this.scenario, { minControl = 3 } = {}) {
    // The control client must have been served during the scenario, not only before it.
    const deadline = Date.now() + this.deadlineMs;
    while (this.controlOk < minControl && this.controlFailures.length === 0 && Date.now() < deadline && this.gw.running) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(this.died, null, `${name}: ${this.died}`);
    assert.ok(this.gw.running, `${name}: the gateway died (code ${this.gw.exitCode}, signal ${this.gw.signal})\n${this.gw.stderrText.slice(-2000)}`);
    const healthz = await request(`${this.gw.adminUrl}/healthz`, { timeoutMs: 5000 });
    assert.equal(healthz.status, 200, `${name}: /healthz`);
    assert.deepEqual(this.controlFailures.slice(0, 5), [], `${name}: the control client's requests failed`);
    assert.ok(this.controlOk >= minControl, `${name}: the control client was served ${this.controlOk} times (at least ${minControl} expected)`);
    assert.deepEqual([...new Set(this.healthFailures)].slice(0, 5), [], `${name}: a healthy phone did not stay healthy`);
    const peakMiB = Math.round((this.peak / MiB) * 10) / 10;
    this.peaks.push({ scenario: name, peakMiB, control: this.controlOk });
    assert.ok(this.peak <= this.rssBoundBytes, `${name}: gateway RSS peaked at ${peakMiB} MiB, over the bound of ${this.rssBoundBytes / MiB} MiB`);
  }

  async stop() {
    this.stopped = true;
    this.client.close();
    await Promise.allSettled(this.loops);
  }

  report(title) {
    const lines = [`${title}: gateway RSS peak per scenario (bound ${this.rssBoundBytes / MiB} MiB)`];
    for (const p of this.peaks) {
      lines.push(`  ${p.scenario.padEnd(48)} ${String(p.peakMiB).padStart(6)} MiB   control requests served: ${p.control}`);
    }
    return lines.join('\n');
  }
}
