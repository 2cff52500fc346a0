// Raw TCP clients for tests of the server layer (timeouts, caps, answers given from a head): the
// bytes sent, the bytes received, and the moment the server closed. Plus starting fleetgate under
// a file descriptor limit (prlimit), for the descriptor tests.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { FLEETGATE_BIN, Gateway, makeTempDir, toYaml } from './gateway.mjs';
import { trackProcess } from './sanitize.mjs';

// Gateways started here are killed by PID when the test process exits, as a backstop.
const live = new Set();
process.on('exit', () => {
  for (const pid of live) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

export class RawClient {
  constructor(socket) {
    this.socket = socket;
    this.received = '';
    this.error = null;
    this.isClosed = false;
    this.closed = new Promise((resolve) => {
      socket.on('close', () => {
        this.isClosed = true;
        resolve(this.received);
      });
    });
    socket.on('data', (d) => {
      this.received += d.toString('latin1');
      this.socket.emit('received');
    });
    socket.on('error', (e) => {
      this.error = e;
    });
  }

  write(bytes) {
    return new Promise((resolve) => {
      if (this.isClosed || this.socket.destroyed) {
        resolve(false);
        return;
      }
      this.socket.write(bytes, (err) => resolve(!err));
    });
  }

  // Resolves with the text received once predicate(text) holds (or rejects at the deadline, or
  // when the connection closes first).
  waitFor(predicate, { timeoutMs = 5000, what = 'bytes from the server' } = {}) {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (predicate(this.received)) {
          done();
          resolve(this.received);
          return true;
        }
        return false;
      };
      const onClose = () => {
        if (!check()) {
          done();
          reject(new Error(`connection closed while waiting for ${what}; received ${JSON.stringify(this.received.slice(0, 200))}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; received ${JSON.stringify(this.received.slice(0, 200))}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.socket.off('received', check);
        this.socket.off('close', onClose);
      };
      this.socket.on('received', check);
      this.socket.on('close', onClose);
      if (!check() && this.isClosed) {
        onClose();
      }
    });
  }

  // The response head, once it is complete.
  async head(options) {
    const text = await this.waitFor((t) => t.includes('\r\n\r\n'), { what: 'a response head', ...options });
    return text.slice(0, text.indexOf('\r\n\r\n'));
  }

  // Resolves with true when the server closed the connection within timeoutMs, else false.
  async closedWithin(timeoutMs) {
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const closed = this.closed.then(() => true);
    const result = await Promise.race([closed, timeout]);
    clearTimeout(timer);
    return result;
  }

  destroy() {
    this.socket.destroy();
  }
}

// Opens a TCP connection to the host and port of url (optionally from localAddress, any address
// of 127.0.0.0/8 on Linux); resolves once connected.
export function rawConnect(url, { localAddress } = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port), localAddress });
    const client = new RawClient(socket);
    socket.once('connect', () => resolve(client));
    socket.once('error', (e) => reject(e));
  });
}

// Starts fleetgate like startGateway() does, but under `prlimit --nofile=SOFT:HARD`. The config
// is written as given (no defaults added).
export async function startGatewayWithFileLimit(config, { soft, hard, env = {}, timeoutMs = 10000 } = {}) {
  const dir = makeTempDir('fleetgate-fd-');
  const configPath = path.join(dir, 'fleetgate.yaml');
  fs.writeFileSync(configPath, toYaml(config));
  const child = spawn('prlimit', [`--nofile=${soft}:${hard}`, FLEETGATE_BIN, '--config', configPath], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child.pid);
  child.on('exit', () => live.delete(child.pid));
  trackProcess(child, `fleetgate --config ${configPath} (under prlimit)`);
  const gw = new Gateway(child, dir, configPath);
  const listening = Promise.all([
    gw.waitForLog((l) => l.msg === 'listening' && l.listener === 'public', { timeoutMs, what: 'the public listening line' }),
    gw.waitForLog((l) => l.msg === 'listening' && l.listener === 'admin', { timeoutMs, what: 'the admin listening line' }),
  ]);
  try {
    const [pub, adm] = await listening;
    gw.publicUrl = `http://${pub.address}`;
    gw.adminUrl = `http://${adm.address}`;
  } catch (e) {
    await gw.kill();
    throw e;
  }
  return gw;
}

// The soft and hard "Max open files" of a process, from /proc/PID/limits.
export function openFileLimits(pid) {
  const text = fs.readFileSync(`/proc/${pid}/limits`, 'utf8');
  const line = text.split('\n').find((l) => l.startsWith('Max open files'));
  const [soft, hard] = line.replace('Max open files', '').trim().split(/\s+/);
  return { soft: Number(soft), hard: Number(hard) };
}
