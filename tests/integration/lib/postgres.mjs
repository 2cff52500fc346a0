// A real PostgreSQL 15 (Debian's package) for a test file, through tests/postgres/pg_server.sh:
// initdb in a temp dir, its own port on 127.0.0.1, a non-root user when run as root, stopped by
// PID. Tests skip only when the server binaries are missing (postgresSkipReason()), never pass
// silently: any other failure to start fails the test.
//
//   const skip = postgresSkipReason();
//   describe('...', { skip }, () => { let pg; before(async () => { pg = await startPostgres(); }) ...
//   pg.url (postgresql://postgres@127.0.0.1:PORT/fleetgate), pg.pid, pg.psql(sql), pg.stop()

import { execFile, execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';

import { REPO_ROOT, makeTempDir, removeDir } from './gateway.mjs';

const SCRIPT = path.join(REPO_ROOT, 'tests', 'postgres', 'pg_server.sh');
const PG_BIN = process.env.FLEETGATE_PG_BIN || '/usr/lib/postgresql/15/bin';
const execFileAsync = promisify(execFile);

const live = new Set(); // pids of servers still running
process.on('exit', () => {
  for (const pid of live) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

// false when the binaries are here; else the reason to skip (the script's own message).
export function postgresSkipReason() {
  const r = spawnSync(SCRIPT, ['check'], { encoding: 'utf8' });
  if (r.status === 0) {
    return false;
  }
  if (r.status === 77) {
    return r.stderr.trim();
  }
  throw new Error(`pg_server.sh check failed (${r.status}): ${r.stderr}`);
}

export class Postgres {
  constructor(dir, url, pid) {
    this.dir = dir;
    this.url = url;
    this.pid = pid;
  }

  // Runs SQL with psql (as the server's superuser); returns its unaligned, tuples-only output.
  psql(sql) {
    return execFileSync(path.join(PG_BIN, 'psql'), ['-X', '-q', '-A', '-t', this.url, '-c', sql], {
      encoding: 'utf8',
    }).trim();
  }

  async stop() {
    if (!this.dir) {
      return;
    }
    await execFileAsync(SCRIPT, ['stop', this.dir]);
    live.delete(this.pid);
    removeDir(this.dir);
    this.dir = null;
  }
}

export async function startPostgres() {
  const dir = makeTempDir('fleetgate-pg-');
  let out;
  try {
    ({ stdout: out } = await execFileAsync(SCRIPT, ['start', dir, '--watch', String(process.pid)], { timeout: 120_000 }));
  } catch (e) {
    removeDir(dir);
    throw new Error(`PostgreSQL did not start: ${e.stderr || e.message}`);
  }
  const url = /^url=(.*)$/m.exec(out)?.[1];
  const pid = Number(/^pid=(\d+)$/m.exec(out)?.[1]);
  if (!url || !pid) {
    removeDir(dir);
    throw new Error(`pg_server.sh start printed no url/pid: ${out}`);
  }
  live.add(pid);
  return new Postgres(dir, url, pid);
}
