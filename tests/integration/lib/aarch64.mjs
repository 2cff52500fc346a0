// The aarch64 binaries (./fleet build --target aarch64) run here under user-mode emulation:
// qemu-aarch64-static called directly on the binary (this machine has no binfmt_misc). Where the
// binaries are, whether the tests may run, and starting them (every process stopped by its PID).
//
// FLEETGATE_SKIP_AARCH64=1 skips the aarch64 tests (with that reason); otherwise a missing qemu or
// binary, or a binary that is not a static aarch64 executable, fails them. Overrides:
// FLEETGATE_QEMU_AARCH64, FLEETGATE_AARCH64_AGENT_BIN, FLEETGATE_AARCH64_LLAMA_SERVER.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { REPO_ROOT, eventually, request } from './gateway.mjs';

export const AARCH64_AGENT_BIN = process.env.FLEETGATE_AARCH64_AGENT_BIN ||
  path.join(REPO_ROOT, 'build-aarch64', 'bin', 'fleetgate-agent');
export const AARCH64_LLAMA_SERVER = process.env.FLEETGATE_AARCH64_LLAMA_SERVER ||
  path.join(REPO_ROOT, '.cache', 'llama-aarch64', 'bin', 'llama-server');

const shown = (p) => (p.startsWith(`${REPO_ROOT}/`) ? path.relative(REPO_ROOT, p) : p);

// The emulator's absolute path (the agent under emulation starts it for its engine), or null.
export function findQemu() {
  const name = process.env.FLEETGATE_QEMU_AARCH64 || 'qemu-aarch64-static';
  if (name.includes('/')) {
    return fs.existsSync(name) ? name : null;
  }
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const candidate = path.join(dir || '.', name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

const EM_AARCH64 = 183;
const PT_DYNAMIC = 2;
const PT_INTERP = 3;

// What the ELF header and program headers say: {machine, static} (static: neither an interpreter
// nor a dynamic section, so no shared library is loaded at run time). Throws on a non-ELF file.
export function elfInfo(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const header = Buffer.alloc(64);
    fs.readSync(fd, header, 0, 64, 0);
    if (header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) {
      throw new Error(`${shown(file)} is not a little-endian 64-bit ELF file`);
    }
    const machine = header.readUInt16LE(18);
    const phoff = Number(header.readBigUInt64LE(32));
    const phentsize = header.readUInt16LE(54);
    const phnum = header.readUInt16LE(56);
    const table = Buffer.alloc(phentsize * phnum);
    fs.readSync(fd, table, 0, table.length, phoff);
    const types = [];
    for (let i = 0; i < phnum; ++i) {
      types.push(table.readUInt32LE(i * phentsize));
    }
    return { machine, aarch64: machine === EM_AARCH64, static: !types.includes(PT_INTERP) && !types.includes(PT_DYNAMIC) };
  } finally {
    fs.closeSync(fd);
  }
}

// Decided before any test runs: a skip reason (FLEETGATE_SKIP_AARCH64=1, or extra reasons the
// caller passes), or null when everything is here. Throws, failing the file, when something is
// missing that ./fleet test would have installed or built.
export function aarch64Gate(binaries, { extraSkip = null } = {}) {
  if (process.env.FLEETGATE_SKIP_AARCH64 === '1') {
    return 'FLEETGATE_SKIP_AARCH64=1';
  }
  if (extraSkip) {
    return extraSkip;
  }
  const problems = [];
  if (!findQemu()) {
    problems.push('qemu-aarch64-static not found (Debian package qemu-user-static)');
  }
  for (const bin of binaries) {
    if (!fs.existsSync(bin)) {
      problems.push(`${shown(bin)} is missing`);
      continue;
    }
    const info = elfInfo(bin);
    if (!info.aarch64 || !info.static) {
      problems.push(`${shown(bin)} is not a static aarch64 executable (ELF machine ${info.machine}, static ${info.static})`);
    }
  }
  if (problems.length > 0) {
    throw new Error(`the aarch64 tests cannot run: ${problems.join('; ')}. ./fleet build --target aarch64 ` +
      'builds the binaries (./fleet test installs and builds everything); FLEETGATE_SKIP_AARCH64=1 skips these tests');
  }
  return null;
}

const live = new Set();
process.on('exit', () => {
  for (const pid of live) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

// Runs an aarch64 binary under the emulator. Collects its output (`text`, for failure messages)
// and its JSON log lines (`logs`, from stderr); PIDs of engines it reports ("engine started") are
// killed too when the test process exits.
export function startEmulated(bin, args, { env = {}, name = path.basename(bin) } = {}) {
  return startLogged(findQemu(), [bin, ...args], { env: { ...process.env, ...env }, name });
}

// The same for any command that ends up running an emulated agent (the fake Acurast processor
// runs the project's entry script, which execs it): `env` is the whole environment (nothing of
// the test's own is added), `cwd` its working folder.
export function startLogged(command, args, { env, cwd = undefined, name = path.basename(command) }) {
  const proc = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env, cwd });
  live.add(proc.pid);
  const child = {
    name,
    proc,
    logs: [],
    text: '',
    exited: new Promise((resolve) => proc.once('exit', (code, signal) => {
      live.delete(proc.pid);
      resolve({ code, signal });
    })),
    get running() {
      return proc.exitCode === null && proc.signalCode === null;
    },
    waitForLog(predicate, { timeoutMs = 30000, what = 'a log line' } = {}) {
      return eventually(() => {
        if (!child.running && !child.logs.some(predicate)) {
          throw new Error(`${name} exited (${proc.exitCode ?? proc.signalCode}) before ${what}\n${child.text.slice(-3000)}`);
        }
        return child.logs.some(predicate);
      }, { timeoutMs, everyMs: 20, what: `${name}: ${what}` })
        .catch((e) => {
          e.message += `\n--- ${name} output (tail) ---\n${child.text.slice(-3000)}`;
          throw e;
        })
        .then(() => child.logs.find(predicate));
    },
    // SIGTERM (SIGKILL after a while); resolves with {code, signal}.
    async stop({ timeoutMs = 20000 } = {}) {
      if (child.running) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
        const result = await child.exited;
        clearTimeout(timer);
        return result;
      }
      return child.exited;
    },
  };
  const collect = (stream, parse) => {
    createInterface({ input: stream }).on('line', (line) => {
      child.text = `${child.text}${line}\n`.slice(-100000);
      if (!parse) {
        return;
      }
      try {
        const entry = JSON.parse(line);
        if (entry && typeof entry === 'object' && entry.msg) {
          child.logs.push(entry);
          if (entry.msg === 'engine started' && entry.pid) {
            live.add(entry.pid);
          }
        }
      } catch {
        // not a log line of ours (an engine's output, passed through)
      }
    });
  };
  collect(proc.stderr, true);
  collect(proc.stdout, false);
  return child;
}

// The emulated agent; resolves once it logged its "listening" line (`base` is its URL).
export async function startEmulatedAgent(args, options = {}) {
  const agent = startEmulated(AARCH64_AGENT_BIN, args, { name: 'aarch64 agent', ...options });
  try {
    const line = await agent.waitForLog((l) => l.msg === 'listening' && l.listener === 'agent', { what: 'listening' });
    agent.base = `http://${line.address}`;
  } catch (e) {
    await agent.stop({ timeoutMs: 2000 });
    throw e;
  }
  return agent;
}

// The emulated llama-server on a given port; resolves once its /health answers 200 (model loaded).
export async function startEmulatedLlama(args, port, { timeoutMs = 120000 } = {}) {
  const llama = startEmulated(AARCH64_LLAMA_SERVER, args, { name: 'aarch64 llama-server' });
  llama.base = `http://127.0.0.1:${port}`;
  try {
    await eventually(async () => {
      if (!llama.running) {
        throw new Error(`llama-server exited (${llama.proc.exitCode ?? llama.proc.signalCode})\n${llama.text.slice(-3000)}`);
      }
      return (await request(`${llama.base}/health`, { timeoutMs: 5000 }).catch(() => ({}))).status === 200;
    }, { timeoutMs, everyMs: 100, what: 'the aarch64 llama-server loaded (/health 200)' });
  } catch (e) {
    e.message += `\n--- llama-server output (tail) ---\n${llama.text.slice(-3000)}`;
    await llama.stop({ timeoutMs: 2000 });
    throw e;
  }
  return llama;
}
