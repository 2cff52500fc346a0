// Starting and stopping fleetgate-agent processes in tests (every process is stopped by its PID).

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { REPO_ROOT } from './gateway.mjs';
import { trackProcess } from './sanitize.mjs';

export const AGENT_BIN = process.env.FLEETGATE_AGENT_BIN ?? path.join(REPO_ROOT, 'build/bin/fleetgate-agent');

// Starts the agent with exactly these arguments; resolves once it logged its "listening" line
// (rejects if it exits first or takes over 5 s). Non-JSON output (an engine child's) is ignored.
export async function startAgent(args, { env = {}, scheme = 'http' } = {}) {
  const proc = spawn(AGENT_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  trackProcess(proc, `fleetgate-agent ${args.join(' ')}`);
  const logs = [];
  const lines = createInterface({ input: proc.stderr });
  const listening = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('agent did not log "listening" in 5 s')), 5000);
    lines.on('line', (line) => {
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      logs.push(entry);
      if (entry.msg === 'listening' && entry.listener === 'agent') {
        clearTimeout(timer);
        resolve(entry);
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`agent exited early with code ${code}: ${JSON.stringify(logs)}`));
    });
  });
  const exited = once(proc, 'exit');
  const line = await listening;
  return { proc, logs, line, exited, base: `${scheme}://${line.address}` };
}

export function stopAgent(agent) {
  if (agent && agent.proc.exitCode === null && agent.proc.signalCode === null) {
    process.kill(agent.proc.pid, 'SIGKILL');
  }
}

// Ports that a test closes and opens again, or hands to another process to bind, come from
// below the kernel's ephemeral range. A port from listen(0), once closed, can be handed at once
// to any other listen(0) or outgoing connection on the machine (ctest runs test files in
// parallel): a fake gateway closed to play "down" then answered as someone else's server, and
// "three failed heartbeats" never came. Below the range only another explicit bind can take it.
function ephemeralLow() {
  try {
    return Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  } catch {
    return 32768;
  }
}

// Listens on 127.0.0.1 (or `host`) on a random port below the ephemeral range; resolves with it.
export async function listenOutsideEphemeral(server, host = '127.0.0.1') {
  const high = ephemeralLow();
  const low = Math.max(1025, high - 12000);
  for (let attempt = 0; high - low > 100 && attempt < 50; ++attempt) {
    const port = low + Math.floor(Math.random() * (high - low));
    const ok = await new Promise((resolve, reject) => {
      const onError = (e) => (e.code === 'EADDRINUSE' ? resolve(false) : reject(e));
      server.once('error', onError);
      server.listen(port, host, () => {
        server.off('error', onError);
        resolve(true);
      });
    });
    if (ok) {
      return server.address().port;
    }
  }
  // An unusual range setting: fall back to the kernel's choice.
  await new Promise((resolve) => server.listen(0, host, resolve));
  return server.address().port;
}

// A loopback port that was free a moment ago (for a process that must know its port up front),
// from below the ephemeral range (see above).
export async function freePort() {
  const srv = net.createServer();
  const port = await listenOutsideEphemeral(srv);
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

// Whether a process with this PID still exists.
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
