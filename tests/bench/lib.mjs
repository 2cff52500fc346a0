// Helpers of the benchmark driver (bench.mjs): processes stopped by PID, free ports, readiness,
// /proc sampling, statistics and Markdown/CSV output.

import { spawn, spawnSync, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function log(message) {
  process.stderr.write(`[bench] ${message}\n`);
}

// ---------------------------------------------------------------------------------------------
// Processes: every one started here is recorded and stopped by its PID (never by name).

const running = new Set();

export class Proc {
  constructor(name, command, args, { env, onLine, cwd, keepLines = 200 } = {}) {
    this.name = name;
    this.command = command;
    this.args = args;
    this.lines = [];
    this.keepLines = keepLines;
    this.stdout = '';
    this.exited = false;
    this.code = null;
    this.signal = null;
    this.child = spawn(command, args, {
      env: env ?? process.env,
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.pid = this.child.pid;
    running.add(this);
    this.waiters = [];
    let partial = '';
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (data) => {
      partial += data;
      let nl;
      while ((nl = partial.indexOf('\n')) >= 0) {
        const line = partial.slice(0, nl);
        partial = partial.slice(nl + 1);
        if (this.lines.length >= this.keepLines) this.lines.shift();
        this.lines.push(line);
        if (onLine) onLine(line);
        for (const w of [...this.waiters]) {
          if (w.test(line)) {
            this.waiters.splice(this.waiters.indexOf(w), 1);
            w.resolve(line);
          }
        }
      }
    });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (data) => {
      this.stdout += data;
    });
    this.done = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        this.exited = true;
        this.code = code;
        this.signal = signal;
        running.delete(this);
        for (const w of this.waiters) w.reject(new Error(`${this.name} exited (${code ?? signal})`));
        this.waiters = [];
        resolve({ code, signal });
      });
      this.child.on('error', (err) => {
        this.exited = true;
        running.delete(this);
        for (const w of this.waiters) w.reject(err);
        this.waiters = [];
        resolve({ code: -1, signal: null, error: err });
      });
    });
  }

  waitForLine(test, timeoutMs = 10000) {
    for (const line of this.lines) if (test(line)) return Promise.resolve(line);
    if (this.exited) return Promise.reject(new Error(`${this.name} exited: ${this.tail()}`));
    return new Promise((resolve, reject) => {
      const w = { test, resolve, reject };
      this.waiters.push(w);
      setTimeout(() => {
        const i = this.waiters.indexOf(w);
        if (i >= 0) {
          this.waiters.splice(i, 1);
          reject(new Error(`${this.name}: no matching line within ${timeoutMs} ms: ${this.tail()}`));
        }
      }, timeoutMs).unref();
    });
  }

  tail(n = 5) {
    return this.lines.slice(-n).join('\n');
  }

  // SIGTERM (or the given signal), then SIGKILL after timeoutMs.
  async stop(signal = 'SIGTERM', timeoutMs = 5000) {
    if (this.exited) return this.done;
    try {
      process.kill(this.pid, signal);
    } catch {
      /* already gone */
    }
    const timer = setTimeout(() => {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }, timeoutMs);
    const result = await this.done;
    clearTimeout(timer);
    return result;
  }
}

export async function stopAll(procs, signal = 'SIGTERM', timeoutMs = 5000) {
  await Promise.all(procs.filter(Boolean).map((p) => p.stop(signal, timeoutMs)));
}

function killAllNow() {
  for (const p of running) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}
process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`${sig}: stopping ${running.size} processes`);
    killAllNow();
    process.exit(130);
  });
}

// ---------------------------------------------------------------------------------------------
// Ports and readiness

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export async function freePorts(n) {
  // Hold them all open at once so the same port is not handed out twice.
  const servers = [];
  for (let i = 0; i < n; i++) {
    const server = net.createServer();
    await new Promise((resolve, reject) => {
      server.on('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    servers.push(server);
  }
  const ports = servers.map((s) => s.address().port);
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

export async function waitForHttp(url, { timeoutMs = 15000, proc, expect = (s) => s === 200 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (proc && proc.exited) throw new Error(`${proc.name} exited: ${proc.tail()}`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      if (expect(res.status)) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = err.message;
    }
    await sleep(50);
  }
  throw new Error(`${url} not ready within ${timeoutMs} ms (${last})${proc ? `: ${proc.tail()}` : ''}`);
}

export async function waitForPort(port, { timeoutMs = 15000, proc } = {}) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc && proc.exited) throw new Error(`${proc.name} exited: ${proc.tail()}`);
    const ok = await new Promise((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`127.0.0.1:${port} not accepting within ${timeoutMs} ms${proc ? `: ${proc.tail()}` : ''}`);
}

export function addressFromLine(line) {
  try {
    return JSON.parse(line).address;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// /proc sampling

let clkTck = 100;
try {
  clkTck = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
} catch {
  /* keep 100 */
}

// CPU seconds (user + system) a process has used so far.
export function cpuSeconds(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / clkTck;
  } catch {
    return NaN;
  }
}

export function rssMiB(pid) {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = status.match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

// Voluntary context switches of all a process's threads so far: each is the thread going to sleep
// (then woken), so over a window they count its wake-ups.
export function wakeups(pid) {
  try {
    let n = 0;
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      const status = fs.readFileSync(`/proc/${pid}/task/${task}/status`, 'utf8');
      const m = status.match(/^voluntary_ctxt_switches:\s+(\d+)/m);
      n += m ? Number(m[1]) : 0;
    }
    return n;
  } catch {
    return NaN;
  }
}

export function openFds(pid) {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return NaN;
  }
}

// Busy fraction of the whole machine (all cores) over a short window: how loaded it is by others.
export async function machineBusy(ms = 2000) {
  const read = () => {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = v[3] + (v[4] || 0);
    const total = v.reduce((a, b) => a + b, 0);
    return { idle, total };
  };
  const a = read();
  await sleep(ms);
  const b = read();
  const total = b.total - a.total;
  return total > 0 ? 1 - (b.idle - a.idle) / total : NaN;
}

export class CpuWindow {
  constructor(pid) {
    this.pid = pid;
    this.cpu0 = cpuSeconds(pid);
    this.t0 = process.hrtime.bigint();
  }
  // CPU seconds used since the window opened, and the wall seconds it lasted.
  read() {
    const wall = Number(process.hrtime.bigint() - this.t0) / 1e9;
    const cpu = cpuSeconds(this.pid) - this.cpu0;
    return { cpu, wall, percent: (100 * cpu) / wall };
  }
}

export function machineFacts() {
  const cpus = os.cpus();
  let kernel = os.release();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    kernel,
    load: os.loadavg().map((x) => x.toFixed(2)).join(' '),
    fdLimit: fdLimit(),
  };
}

export function fdLimit() {
  try {
    const limits = fs.readFileSync('/proc/self/limits', 'utf8');
    const m = limits.match(/Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/);
    return m ? { soft: Number(m[1]) || Infinity, hard: Number(m[2]) || Infinity } : null;
  } catch {
    return null;
  }
}

export function toolVersion(cmd, args, pattern) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  const text = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  const m = text.match(pattern);
  return m ? m[1] : text.split('\n')[0].trim() || 'unavailable';
}

// ---------------------------------------------------------------------------------------------
// Statistics

export function median(values) {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

export function spread(values) {
  const v = values.filter((x) => Number.isFinite(x));
  if (v.length === 0) return { median: NaN, min: NaN, max: NaN, n: 0 };
  return { median: median(v), min: Math.min(...v), max: Math.max(...v), n: v.length };
}

export function fmt(x, digits = 2) {
  if (x === undefined || x === null || Number.isNaN(x)) return '–';
  if (!Number.isFinite(x)) return String(x);
  const abs = Math.abs(x);
  if (abs >= 1000) return Math.round(x).toLocaleString('en-US');
  if (abs >= 100) return x.toFixed(Math.max(0, digits - 2));
  if (abs >= 10) return x.toFixed(Math.max(0, digits - 1));
  return x.toFixed(digits);
}

// "median (min–max)" over the repeats, or the single value.
export function fmtSpread(values, digits = 2) {
  const s = spread(values);
  if (s.n === 0) return '–';
  if (s.n === 1 || s.min === s.max) return fmt(s.median, digits);
  return `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)})`;
}

// ---------------------------------------------------------------------------------------------
// Output

export function markdownTable(header, rows) {
  const lines = [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`];
  for (const row of rows) lines.push(`| ${row.join(' | ')} |`);
  return lines.join('\n');
}

export function csv(rows) {
  if (rows.length === 0) return '';
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cell = (v) => {
    if (v === undefined || v === null) return '';
    const s = typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(4)) : String(v);
    return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return [keys.join(','), ...rows.map((r) => keys.map((k) => cell(r[k])).join(','))].join('\n') + '\n';
}

export function writeFile(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}
