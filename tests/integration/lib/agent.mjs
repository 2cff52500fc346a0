// Starting and stopping fleetgate-agent processes in tests (every process is stopped by its PID).

import { spawn } from 'node:child_process';
import { once } from 'node:events';
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

// A loopback port that was free a moment ago (for a process that must know its port up front).
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
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
