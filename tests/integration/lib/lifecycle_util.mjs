// Helpers for the fleet lifecycle integration tests (lifecycle_*.test.mjs): the admin API, replica
// states, a steady request load, config rewrites for SIGHUP, and printing measured figures.
// Builds on lib/gateway.mjs and lib/fake_replica.mjs (shared with the gateway tests).

import fs from 'node:fs';

import { fakeReplicaByUrl } from './fake_replica.mjs';
import { eventually, postJson, request, sleep, toYaml } from './gateway.mjs';

export const ADMIN_TOKEN = 'it-admin-token-5d1c';
export const REGISTRATION_TOKEN = 'it-registration-token-93ab';
export const TOKEN_ENV = {
  FG_IT_ADMIN_TOKEN: ADMIN_TOKEN,
  FG_IT_REGISTRATION_TOKEN: REGISTRATION_TOKEN,
};

// Short health settings: a dead replica is noticed in ~1.5 s, a live one proven in ~1 s. The
// probe timeout (less than the interval, as the gateway requires) is generous: a probe of a live
// fake that a loaded machine (or the sanitized build) answers late must not count as a failure,
// or a replica flaps and the tests that count state changes fail (it was 150 ms).
export const FAST_HEALTH = Object.freeze({
  interval: '500ms',
  timeout: '400ms',
  unhealthy_after: 3,
  healthy_after: 2,
  eject_after: 3,
});

// The same defaults startGateway() adds (listeners on port 0, a short drain), so a rewritten file
// keeps the listen addresses of the running gateway (they change only on restart).
export function withListeners(config) {
  const c = structuredClone(config);
  c.server = { listen: '127.0.0.1:0', drain_timeout: '3s', ...(c.server ?? {}) };
  c.admin = { listen: '127.0.0.1:0', ...(c.admin ?? {}) };
  c.log = { level: 'info', ...(c.log ?? {}) };
  return c;
}

// Replaces the running gateway's configuration file (atomically: write then rename, so the
// gateway never reads half a file).
export function rewriteConfig(gw, config) {
  const text = typeof config === 'string' ? config : toYaml(withListeners(config));
  const tmp = `${gw.configPath}.next`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, gw.configPath);
}

// Sends SIGHUP and resolves with the first "configuration reloaded" or "reload refused" line that
// follows it.
export async function reload(gw, { timeoutMs = 5000 } = {}) {
  const seen = gw.logs.length;
  process.kill(gw.pid, 'SIGHUP');
  const isOutcome = (l) => l.msg === 'configuration reloaded' || /^reload refused/.test(l.msg ?? '');
  await eventually(() => gw.logs.slice(seen).some(isOutcome), { timeoutMs, everyMs: 10, what: 'the reload outcome log line' });
  return gw.logs.slice(seen).find(isOutcome);
}

// ---- admin API ----

export function admin(gw, method, path, { token = ADMIN_TOKEN, body, timeoutMs = 5000, headers: extra = {} } = {}) {
  const headers = token === null ? { ...extra } : { Authorization: `Bearer ${token}`, ...extra };
  return request(`${gw.adminUrl}${path}`, { method, headers, body, timeoutMs });
}

// The header a registered replica proves its identity with (docs/lifecycle.md).
export const SECRET_HEADER = 'Fleetgate-Replica-Secret';
const secretHeaders = (secret) => (secret === undefined || secret === null ? {} : { [SECRET_HEADER]: secret });

export async function replicas(gw, { token = ADMIN_TOKEN } = {}) {
  const res = await admin(gw, 'GET', '/admin/v1/replicas', { token });
  if (res.status !== 200 || !Array.isArray(res.json?.replicas)) {
    throw new Error(`GET /admin/v1/replicas answered ${res.status}: ${res.text}`);
  }
  return res.json.replicas;
}

export async function replicaByUrl(gw, url, options) {
  return (await replicas(gw, options)).find((r) => r.url === url);
}

export async function fleet(gw, model, { token = ADMIN_TOKEN } = {}) {
  const res = await admin(gw, 'GET', '/admin/v1/fleet', { token });
  if (res.status !== 200 || !Array.isArray(res.json?.models)) {
    throw new Error(`GET /admin/v1/fleet answered ${res.status}: ${res.text}`);
  }
  return model === undefined ? res.json.models : res.json.models.find((m) => m.model === model);
}

// Polls the replica list until predicate(replica of that URL, or undefined) holds; returns it.
export async function waitForReplica(gw, url, predicate, { timeoutMs = 8000, what } = {}) {
  let last;
  try {
    await eventually(async () => {
      last = await replicaByUrl(gw, url);
      return predicate(last);
    }, { timeoutMs, everyMs: 20, what: what ?? `replica ${url}` });
  } catch (e) {
    e.message += `; last seen: ${JSON.stringify(last)}`;
    throw e;
  }
  return last;
}

export function waitForState(gw, url, state, options = {}) {
  return waitForReplica(gw, url, (r) => r?.state === state, { what: `replica ${url} ${state}`, ...options });
}

// Registers; `secret` (optional) is the replica secret of a registration being updated. A fake
// replica serving the registered URL is given the secret it was issued, so that it passes the
// gateway's URL challenge as a real agent would.
export async function register(gw, body, { token = REGISTRATION_TOKEN, secret } = {}) {
  const res = await admin(gw, 'POST', '/admin/v1/replicas/register', { token, body, headers: secretHeaders(secret) });
  if (typeof res.json?.secret === 'string' && typeof body?.url === 'string') {
    fakeReplicaByUrl(body.url)?.setChallengeSecret(res.json.secret);
  }
  return res;
}

export function heartbeat(gw, id, { token = REGISTRATION_TOKEN, secret } = {}) {
  return admin(gw, 'POST', `/admin/v1/replicas/${id}/heartbeat`, { token, headers: secretHeaders(secret) });
}

export function deregister(gw, id, { token = REGISTRATION_TOKEN, secret } = {}) {
  return admin(gw, 'POST', `/admin/v1/replicas/${id}/deregister`, { token, headers: secretHeaders(secret) });
}

// "replica state changed" log lines of one replica (by id), in order.
export function stateChanges(gw, id) {
  return gw.logs.filter((l) => l.msg === 'replica state changed' && l.replica === id);
}

// Resolves with the log line (already seen or future) of a state change of `id` to `to`, logged
// after the first `fromIndex` log lines.
export function waitForStateLog(gw, id, to, { fromIndex = 0, timeoutMs = 8000 } = {}) {
  const found = gw.logs.slice(fromIndex).find((l) => l.msg === 'replica state changed' && l.replica === id && l.to === to);
  if (found) {
    return Promise.resolve(found);
  }
  return gw.waitForLog((l) => l.msg === 'replica state changed' && l.replica === id && l.to === to, {
    timeoutMs,
    what: `replica ${id} -> ${to}`,
  });
}

// ---- probe answers of a fake replica ----

// The shared fake answers its health probes (GET) at once with fake.healthStatus. The lifecycle
// tests also need probes that hang, llama.cpp's "Loading model" 503 and an agent's slot report:
// setProbe(fake, behaviour) puts a filter in front of the fake's request handler for GET requests.
//   null                   the fake's own probe answer (default)
//   {type: 'hang'}         read the probe, never answer
//   {status, body}         answer with this status and JSON body (a string or an object)
// POST requests always go to the fake's own handler.
const probeFilters = new WeakMap();

export function setProbe(fake, behaviour) {
  if (!probeFilters.has(fake)) {
    const server = fake.server;
    const original = server.listeners('request');
    server.removeAllListeners('request');
    const state = { behaviour: null };
    probeFilters.set(fake, state);
    server.on('request', (req, res) => {
      const b = state.behaviour;
      const challenge = req.url.split('?')[0].endsWith('/fleetgate/v1/challenge');
      if (req.method !== 'GET' || b === null || challenge) {
        for (const listener of original) {
          listener.call(server, req, res);
        }
        return;
      }
      req.resume();
      fake.probes?.push({ path: req.url, headers: { ...req.headers }, at: Date.now(), filtered: true });
      if (b.type === 'hang') {
        return;
      }
      const body = typeof b.body === 'string' ? b.body : JSON.stringify(b.body ?? {});
      res.writeHead(b.status ?? 200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
    });
  }
  probeFilters.get(fake).behaviour = behaviour;
}

// A phone that fails: 500 to its probes and to every request.
export function failEverything(fake) {
  setProbe(fake, null);
  fake.setHealth(500);
  fake.setMode({ type: 'status', status: 500 });
}

// A phone that hangs: accepts connections and requests, answers nothing.
export function hangEverything(fake) {
  setProbe(fake, { type: 'hang' });
  fake.setMode({ type: 'hang' });
}

// Back to normal: probes 200, requests answered (with an optional mode).
export function heal(fake, mode = {}) {
  setProbe(fake, null);
  fake.setHealth(200);
  fake.setMode(mode);
}

// ---- traffic ----

export const chatBody = (model, extra = {}) => ({ model, messages: [{ role: 'user', content: 'classify this transaction' }], ...extra });

export function chat(gw, model, extra = {}, options = {}) {
  return postJson(gw.publicUrl, '/v1/chat/completions', chatBody(model, extra), options);
}

// Requests a fake replica received, without the health probes (GET).
export function served(fake) {
  return fake.requests.filter((r) => r.method !== 'GET');
}

// A steady stream of chat requests by `concurrency` workers, each sending one request after the
// other, until stop(). Every request is recorded with its outcome; `marker` tags the bodies.
export class Load {
  constructor(gw, model, { concurrency = 4, extra = {}, timeoutMs = 15000, pauseMs = 0 } = {}) {
    this.gw = gw;
    this.model = model;
    this.concurrency = concurrency;
    this.extra = extra;
    this.timeoutMs = timeoutMs;
    this.pauseMs = pauseMs;
    this.sent = 0;
    this.results = []; // {n, status, error, start, end, requestId}
    this.stopping = false;
    this.workers = [];
  }

  start() {
    for (let w = 0; w < this.concurrency; ++w) {
      this.workers.push(this.#worker(w));
    }
    return this;
  }

  async #worker(w) {
    while (!this.stopping) {
      const n = ++this.sent;
      const start = Date.now();
      const entry = { n, worker: w, start, status: null, error: null, end: null, requestId: null };
      try {
        const res = await chat(this.gw, this.model, { ...this.extra, load_n: n }, { timeoutMs: this.timeoutMs });
        entry.status = res.status;
        entry.requestId = res.requestId;
        if (res.status !== 200) {
          entry.error = res.text.slice(0, 300);
        }
      } catch (e) {
        entry.error = String(e.message ?? e);
      }
      entry.end = Date.now();
      this.results.push(entry);
      if (this.pauseMs > 0) {
        await sleep(this.pauseMs);
      }
    }
  }

  get ok() {
    return this.results.filter((r) => r.status === 200).length;
  }

  get failures() {
    return this.results.filter((r) => r.status !== 200);
  }

  // Waits until `count` more requests completed.
  async waitForMore(count, { timeoutMs = 8000 } = {}) {
    const target = this.results.length + count;
    await eventually(() => this.results.length >= target, { timeoutMs, everyMs: 10, what: `${count} more load requests` });
  }

  // Stops sending; resolves once every request sent has its answer.
  async stop() {
    this.stopping = true;
    await Promise.all(this.workers);
    return this.results;
  }
}

// ---- figures ----

// Prints a measured figure in the spec reporter's output, as a diagnostic of the test:
// "ℹ FIGURE <name>: <value>" (grep FIGURE).
export function figure(t, name, value) {
  t.diagnostic(`FIGURE ${name}: ${value}`);
}
