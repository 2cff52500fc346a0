// Sanitizer reports of the processes a test file starts (./fleet test --sanitize).
//
// Under FLEETGATE_SANITIZE=1 (set by ./fleet test --sanitize, with ASAN_OPTIONS/UBSAN_OPTIONS
// asking for halt_on_error and exit code 86) this module, imported by lib/gateway.mjs before any
// process starts, adds log_path=<temp dir>/report to both options. Every sanitized process the
// test file starts, directly or not (a gateway, an agent, the agents a gateway starts for
// models[].local, a `--check` run), then writes any AddressSanitizer, LeakSanitizer or
// UndefinedBehaviorSanitizer report to report.<pid> in that directory (UBSan, inside the ASan
// runtime, writes to stderr instead: trackProcess() keeps a started child's stderr for it). When the test file's process
// exits, each report is printed and the file fails (exit code 1), whether or not the test that
// started the process noticed: a report is a defect even when the answer looked right.
//
// Outside sanitize mode this does nothing.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const SANITIZE = process.env.FLEETGATE_SANITIZE === '1';
// The exit code ./fleet gives a process a sanitizer stopped (ASAN_OPTIONS/UBSAN_OPTIONS exitcode).
export const SANITIZER_EXIT_CODE = 86;

const started = new Map(); // pid -> what it was (for the report)
let reportDir = null;

function withLogPath(options, file) {
  const kept = (options ?? '').split(':').filter((o) => o && !o.startsWith('log_path='));
  return [...kept, `log_path=${file}`].join(':');
}

if (SANITIZE) {
  reportDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleetgate-sanitizer-'));
  const file = path.join(reportDir, 'report');
  process.env.ASAN_OPTIONS = withLogPath(process.env.ASAN_OPTIONS, file);
  process.env.UBSAN_OPTIONS = withLogPath(process.env.UBSAN_OPTIONS, file);
  process.on('exit', () => {
    const reports = sanitizerReports();
    fs.rmSync(reportDir, { recursive: true, force: true });
    if (reports.length === 0) {
      return;
    }
    for (const r of reports) {
      process.stderr.write(`\n==== sanitizer report of pid ${r.pid} (${r.what}) ====\n${r.text}\n`);
    }
    process.stderr.write(`${reports.length} sanitizer report(s): the test file fails\n`);
    process.exitCode = 1;
  });
}

// Notes what a started process is, so that a report names it, and ends the test file at once when
// a sanitizer stopped it (exit code 86): its report is printed by the exit handler above, and a
// test waiting for the dead process would otherwise hang until ctest's timeout.
export function trackProcess(child, what) {
  if (!SANITIZE || !child?.pid) {
    return;
  }
  started.set(child.pid, what);
  // UndefinedBehaviorSanitizer in the ASan runtime ignores log_path and writes to stderr: keep
  // the tail of each child's stderr for that.
  let tail = '';
  child.stderr?.on('data', (chunk) => {
    tail = (tail + chunk.toString()).slice(-20000);
  });
  child.once('exit', (code) => {
    if (code === SANITIZER_EXIT_CODE || /runtime error:/.test(tail)) {
      const ub = tail.split('\n').filter((l) => /runtime error:|^\s+#\d+ /.test(l)).join('\n');
      process.stderr.write(`\na sanitizer stopped pid ${child.pid} (${what}): ending the test file\n${ub}\n`);
      process.exit(1);
    }
  });
}

// The reports written so far: [{pid, what, text}].
export function sanitizerReports() {
  if (!reportDir) {
    return [];
  }
  let names = [];
  try {
    names = fs.readdirSync(reportDir);
  } catch {
    return [];
  }
  return names.map((name) => {
    const pid = Number(name.split('.').pop());
    const text = fs.readFileSync(path.join(reportDir, name), 'utf8');
    return { pid, what: started.get(pid) ?? 'a process started by the test', text };
  }).filter((r) => r.text.trim() !== '');
}
