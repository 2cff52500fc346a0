// Helpers for the deployment tests (deploy_*.test.mjs): systemd unit files, the Dockerfile and
// the Kubernetes manifests of deploy/, read as the tools that consume them would.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { DockerfileParser } from 'dockerfile-ast';

import { REPO_ROOT } from './gateway.mjs';

export const DEPLOY_DIR = path.join(REPO_ROOT, 'deploy');
export const DOCKERFILE = path.join(DEPLOY_DIR, 'docker', 'Dockerfile');
export const SYSTEMD_ANALYZE = process.env.SYSTEMD_ANALYZE || '/usr/bin/systemd-analyze';

// A systemd unit file as {section: {key: [values...]}}, in file order. Comments (# ;) and blank
// lines dropped; a trailing backslash continues a line (systemd.syntax(7)). A key written more
// than once keeps every value (ExecReload=, SystemCallFilter=, ...); an empty assignment is kept
// as '' (it resets the list in systemd).
export function parseUnit(text) {
  const out = {};
  let section = null;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; ++i) {
    let line = lines[i].trim();
    while (line.endsWith('\\') && i + 1 < lines.length) {
      line = `${line.slice(0, -1)} ${lines[++i].trim()}`;
    }
    if (line === '' || line.startsWith('#') || line.startsWith(';')) {
      continue;
    }
    const header = line.match(/^\[([^\]]+)\]$/);
    if (header) {
      section = header[1];
      out[section] ??= {};
      continue;
    }
    const eq = line.indexOf('=');
    if (section === null || eq < 0) {
      throw new Error(`line ${i + 1}: not a key=value in a section: ${line}`);
    }
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim();
    (out[section][key] ??= []).push(value);
  }
  return out;
}

// The last value of a key (what systemd uses for a single-valued setting), or undefined.
export function unitValue(unit, section, key) {
  const v = unit[section]?.[key];
  return v === undefined ? undefined : v[v.length - 1];
}

// systemd's time span ("45s", "1min 30s", "2m", "500ms", a bare number = seconds) in seconds.
export function systemdSeconds(text) {
  const units = { us: 1e-6, ms: 1e-3, s: 1, sec: 1, m: 60, min: 60, h: 3600, hr: 3600 };
  let total = 0;
  const parts = String(text).trim().split(/\s+/);
  for (const part of parts) {
    const m = part.match(/^(\d+(?:\.\d+)?)([a-z]*)$/);
    if (!m || !(m[2] === '' || m[2] in units)) {
      throw new Error(`not a systemd time span: ${text}`);
    }
    total += Number(m[1]) * (m[2] === '' ? 1 : units[m[2]]);
  }
  return total;
}

// Fleetgate's duration ("30s", "250ms", "5m", "1h", "0s") in seconds.
export function fleetgateSeconds(text) {
  const m = String(text).match(/^(\d+)(ms|s|m|h)$/);
  if (!m) {
    throw new Error(`not a fleetgate duration: ${text}`);
  }
  return Number(m[1]) * { ms: 1e-3, s: 1, m: 60, h: 3600 }[m[2]];
}

export function systemdAnalyzeMissing() {
  return fs.existsSync(SYSTEMD_ANALYZE) ? null : `${SYSTEMD_ANALYZE} is missing: install the Debian package "systemd" (./fleet test installs it)`;
}

export function systemdAnalyze(args, { timeoutMs = 30000 } = {}) {
  const r = spawnSync(SYSTEMD_ANALYZE, args, { encoding: 'utf8', timeout: timeoutMs });
  if (r.error) {
    throw r.error;
  }
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// The Dockerfile as stages: [{from: {image, tag, stage}, instructions: [{keyword, args, flags, text}]}].
export function stages(text) {
  const file = DockerfileParser.parse(text);
  const out = [];
  for (const ins of file.getInstructions()) {
    const item = {
      keyword: ins.getKeyword(),
      args: ins.getArguments().map((a) => a.getValue()),
      flags: Object.fromEntries((ins.getFlags?.() ?? []).map((f) => [f.getName(), f.getValue()])),
      text: ins.getArgumentsContent() ?? '',
    };
    if (item.keyword === 'FROM') {
      out.push({ from: { image: ins.getImageName(), tag: ins.getImageTag(), stage: ins.getBuildStage() }, instructions: [] });
    } else if (out.length > 0) {
      out[out.length - 1].instructions.push(item);
    }
  }
  return out;
}

// The packages a RUN's `apt-get install` lines name (options dropped).
export function aptInstalls(stage) {
  const pkgs = [];
  for (const ins of stage.instructions.filter((i) => i.keyword === 'RUN')) {
    for (const cmd of ins.text.split(/&&|;/)) {
      const m = cmd.match(/apt-get\s+install\s+(.*)$/s);
      if (m) {
        pkgs.push(...m[1].trim().split(/\s+/).filter((w) => !w.startsWith('-')));
      }
    }
  }
  return pkgs;
}

