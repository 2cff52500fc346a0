// deploy/systemd/*.service (issue 15, section 5):
//  - `systemd-analyze verify` accepts each unit with no warning. verify checks that every Exec*
//    binary exists and is executable, so it runs on a copy with /usr/local/bin/ rewritten to this
//    build's build/bin/ (the only change); a mutated copy (a misspelt directive) proves a warning
//    fails the test;
//  - `systemd-analyze security --offline=yes` scores the sandbox (the figure is printed; it must
//    stay "OK", at most 2.0), and the sandbox directives the deployment promises are set;
//  - TimeoutStopSec leaves the gateway its drain (server.drain_timeout of config/example.yaml);
//  - ExecReload, run as systemd runs it (each line in order, $MAINPID filled in, the first failure
//    stops), against a real gateway: a broken file is refused by the --check line and no SIGHUP is
//    sent; a good one is applied ("configuration reloaded");
//  - the gateway, with a local simulated phone, serves under the unit's main restrictions as far
//    as they can be reproduced without systemd (root only): an unprivileged uid and gid, no
//    capabilities (effective, permitted, bounding), no_new_privs, every mount read-only (as
//    ProtectSystem=strict, and /tmp too, stricter than PrivateTmp), in a private mount namespace.
//    Not reproduced: the system call filter, the address-family and namespace restrictions.
//
// Skipped (with the reason) only when systemd-analyze is missing; ./fleet test installs the
// Debian package "systemd". systemd is not PID 1 here: the units are verified, not started.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import YAML from 'yaml';

import { DEPLOY_DIR, fleetgateSeconds, parseUnit, systemdAnalyze, systemdAnalyzeMissing, systemdSeconds, unitValue } from './lib/deploy_util.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import { FLEETGATE_BIN, Gateway, REPO_ROOT, eventually, makeTempDir, postJson, removeDir, request, startGateway, stopChecked } from './lib/gateway.mjs';

const UNITS = ['fleetgate.service', 'fleetgate-agent.service'];
const BIN_DIR = path.dirname(FLEETGATE_BIN);
const INSTALLED_BIN_DIR = '/usr/local/bin/';
const missing = systemdAnalyzeMissing();
if (missing) {
  console.log(`# deploy_systemd: SKIPPED (verify, security): ${missing}`);
}

const readUnit = (name) => fs.readFileSync(path.join(DEPLOY_DIR, 'systemd', name), 'utf8');

// The unit with its installed binary paths pointing at this build, written to `dir`.
function localCopy(dir, name, text = readUnit(name)) {
  assert.ok(text.includes(INSTALLED_BIN_DIR), `${name} runs its binary from ${INSTALLED_BIN_DIR}`);
  const file = path.join(dir, name);
  fs.writeFileSync(file, text.replaceAll(INSTALLED_BIN_DIR, `${BIN_DIR}/`));
  return file;
}

describe('the systemd units', () => {
  let dir;
  before(() => {
    dir = makeTempDir('fleetgate-systemd-');
  });
  after(() => removeDir(dir));

  for (const name of UNITS) {
    test(`${name}: systemd-analyze verify accepts it, with no warning`, { skip: missing ?? false }, () => {
      for (const bin of ['fleetgate', 'fleetgate-agent']) {
        assert.ok(fs.existsSync(path.join(BIN_DIR, bin)), `${BIN_DIR}/${bin} is built`);
      }
      const r = systemdAnalyze(['verify', localCopy(dir, name)]);
      assert.equal(r.status, 0, `systemd-analyze verify ${name}:\n${r.stdout}${r.stderr}`);
      assert.equal(`${r.stdout}${r.stderr}`.trim(), '', `systemd-analyze verify ${name} warns`);
    });

    test(`${name}: the sandbox scores OK in systemd-analyze security`, { skip: missing ?? false }, () => {
      const r = systemdAnalyze(['security', '--offline=yes', localCopy(dir, name)]);
      assert.equal(r.status, 0, r.stderr);
      const m = r.stdout.match(/Overall exposure level for \S+: (\d+(?:\.\d+)?) (\S+)/);
      assert.ok(m, `an overall exposure level in:\n${r.stdout.slice(-500)}`);
      console.log(`# systemd-analyze security ${name}: exposure ${m[1]} ${m[2]} (0 = locked down, 10 = exposed)`);
      assert.ok(Number(m[1]) <= 2.0, `${name}: exposure ${m[1]} ${m[2]}, over 2.0:\n${r.stdout}`);
    });
  }

  test('a unit with a misspelt directive is not accepted (the check can fail)', { skip: missing ?? false }, () => {
    const bad = readUnit('fleetgate.service').replace('ProtectSystem=strict', 'ProtectSytem=strict');
    const r = systemdAnalyze(['verify', localCopy(dir, 'fleetgate.service', bad)]);
    assert.match(`${r.stdout}${r.stderr}`, /Unknown key.*ProtectSytem/);
  });

  for (const name of UNITS) {
    test(`${name}: the sandbox directives are set`, () => {
      const unit = parseUnit(readUnit(name));
      const expected = {
        DynamicUser: 'yes',
        NoNewPrivileges: 'yes',
        CapabilityBoundingSet: '',
        AmbientCapabilities: '',
        ProtectSystem: 'strict',
        ProtectHome: 'yes',
        PrivateTmp: 'yes',
        PrivateDevices: 'yes',
        ProtectKernelTunables: 'yes',
        ProtectKernelModules: 'yes',
        ProtectControlGroups: 'yes',
        RestrictAddressFamilies: 'AF_INET AF_INET6 AF_UNIX',
        RestrictNamespaces: 'yes',
        RestrictSUIDSGID: 'yes',
        MemoryDenyWriteExecute: 'yes',
        SystemCallArchitectures: 'native',
        KillSignal: 'SIGTERM',
      };
      for (const [key, value] of Object.entries(expected)) {
        assert.equal(unitValue(unit, 'Service', key), value, `${name}: ${key}=${value}`);
      }
      assert.deepEqual(unit.Service.SystemCallFilter, ['@system-service', '~@privileged'], `${name}: system calls`);
      const envFile = unitValue(unit, 'Service', 'EnvironmentFile');
      assert.match(envFile, /^\/etc\/fleetgate\/[a-z-]+\.env$/, `${name}: the keys come from a file in /etc/fleetgate`);
      for (const exec of [...unit.Service.ExecStart, ...unit.Service.ExecStartPre]) {
        assert.match(exec, / --config \/etc\/fleetgate\/[a-z]+\.yaml( --check)?$/, `${name}: the configuration is in /etc/fleetgate: ${exec}`);
      }
      assert.equal(unitValue(unit, 'Install', 'WantedBy'), 'multi-user.target');
    });
  }

  test("fleetgate.service: TimeoutStopSec leaves the gateway its drain_timeout, and the keys' variables are the example's", () => {
    const unit = parseUnit(readUnit('fleetgate.service'));
    const example = YAML.parse(fs.readFileSync(path.join(REPO_ROOT, 'config', 'example.yaml'), 'utf8'));
    const drain = fleetgateSeconds(example.server.drain_timeout);
    const stop = systemdSeconds(unitValue(unit, 'Service', 'TimeoutStopSec'));
    assert.ok(stop > drain, `TimeoutStopSec ${stop}s must exceed server.drain_timeout ${drain}s, or systemd kills a draining gateway`);
    // The comment that tells the operator what goes into the environment file names the
    // variables config/example.yaml reads the secrets from.
    const text = readUnit('fleetgate.service');
    for (const variable of [example.server.api_keys_env, example.admin.token_env, example.registration.token_env]) {
      assert.ok(text.includes(`${variable}=`), `fleetgate.service shows ${variable}= for its environment file`);
    }
  });

  test('fleetgate-agent.service: TimeoutStopSec leaves the agent its drain_timeout', () => {
    const unit = parseUnit(readUnit('fleetgate-agent.service'));
    const example = YAML.parse(fs.readFileSync(path.join(REPO_ROOT, 'replica-agent', 'agent.example.yaml'), 'utf8'));
    const stop = systemdSeconds(unitValue(unit, 'Service', 'TimeoutStopSec'));
    assert.ok(stop > fleetgateSeconds(example.drain_timeout), `TimeoutStopSec ${stop}s > drain_timeout ${example.drain_timeout}`);
  });
});

describe("fleetgate.service's ExecReload against a running gateway", () => {
  let fake;
  let gw;
  const unit = parseUnit(readUnit('fleetgate.service'));

  // Runs the unit's ExecReload lines as systemd does: in order, $MAINPID replaced, the first
  // command that fails stops the rest (no line here has systemd's '-' prefix). Returns the
  // results of the commands that ran.
  function systemctlReload(configPath) {
    const results = [];
    for (const line of unit.Service.ExecReload) {
      assert.ok(!/["'\\]/.test(line) && !line.startsWith('-'), `a plain command line: ${line}`);
      const argv = line
        .replaceAll('$MAINPID', String(gw.pid))
        .replaceAll('/etc/fleetgate/fleet.yaml', configPath)
        .replaceAll(INSTALLED_BIN_DIR, `${BIN_DIR}/`)
        .split(/\s+/);
      const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8', timeout: 10000 });
      results.push({ argv, status: r.status, output: `${r.stdout}${r.stderr}` });
      if (r.status !== 0) {
        break;
      }
    }
    return results;
  }

  const config = (model) => [
    'server:',
    '  listen: 127.0.0.1:0',
    '  drain_timeout: 1s',
    'admin:',
    '  listen: 127.0.0.1:0',
    'models:',
    `  - name: ${model}`,
    `    endpoints: [${JSON.stringify(fake.url)}]`,
    '',
  ].join('\n');

  before(async () => {
    fake = await startFakeReplica({ name: 'r' });
    gw = await startGateway(config('first'));
  });
  after(async () => {
    await stopChecked(gw);
    await fake?.close?.();
  });

  test('it ends by sending SIGHUP to the main process, after a --check of the file', () => {
    const reload = unit.Service.ExecReload;
    assert.match(reload[reload.length - 1], /^\/(usr\/)?bin\/kill -HUP \$MAINPID$/);
    assert.ok(reload.slice(0, -1).some((l) => l.endsWith('--config /etc/fleetgate/fleet.yaml --check')));
  });

  test('a broken file: the --check line fails, no SIGHUP is sent, the gateway keeps running', () => {
    fs.writeFileSync(gw.configPath, `${config('second')}routing: {queue_timeout: soon}\n`);
    const results = systemctlReload(gw.configPath);
    assert.equal(results.length, 1, `only the --check ran: ${JSON.stringify(results)}`);
    assert.equal(results[0].status, 1);
    assert.match(results[0].output, /queue_timeout/);
    assert.ok(gw.running, 'the gateway still runs');
  });

  test('a good file: SIGHUP is sent and the gateway applies it', async () => {
    fs.writeFileSync(gw.configPath, config('third'));
    const results = systemctlReload(gw.configPath);
    assert.deepEqual(results.map((r) => r.status), results.map(() => 0), JSON.stringify(results));
    assert.equal(results.length, unit.Service.ExecReload.length);
    await gw.waitForLog((l) => l.msg === 'configuration reloaded', { timeoutMs: 10000 });
    assert.ok(!gw.logs.some((l) => /^reload refused/.test(l.msg)), 'no reload was refused: the broken file never got a SIGHUP');
  });
});

// The restrictions of fleetgate.service reproduced with util-linux (unshare, setpriv), as far as
// they go without systemd as PID 1.
function sandboxMissing() {
  if (process.getuid?.() !== 0) {
    return 'needs root (a mount namespace and setpriv)';
  }
  for (const bin of ['/usr/bin/unshare', '/usr/bin/setpriv']) {
    if (!fs.existsSync(bin)) {
      return `${bin} is missing (Debian util-linux)`;
    }
  }
  const r = spawnSync('/usr/bin/unshare', ['-m', '--propagation', 'private', 'true'], { encoding: 'utf8' });
  return r.status === 0 ? null : `no mount namespace here: ${r.stderr.trim()}`;
}
const noSandbox = sandboxMissing();
if (noSandbox) {
  console.log(`# deploy_systemd: the sandboxed run is SKIPPED: ${noSandbox}`);
}

describe("the gateway under fleetgate.service's restrictions (reproduced without systemd)", { skip: noSandbox ?? false }, () => {
  const NOBODY = 65534;
  let gw;
  let dir;

  before(async () => {
    dir = makeTempDir('fleetgate-sandbox-');
    fs.chmodSync(dir, 0o755);
    const configPath = path.join(dir, 'fleet.yaml');
    fs.writeFileSync(
      configPath,
      ['server: {listen: 127.0.0.1:0}', 'admin: {listen: 127.0.0.1:0}', 'models: [{name: m, local: {count: 1, profile: fast-test, time_scale: 20}}]', ''].join('\n'),
    );
    fs.chmodSync(configPath, 0o644);
    fs.mkdirSync(path.join(dir, 'state'), { mode: 0o750 });
    fs.chownSync(path.join(dir, 'state'), NOBODY, NOBODY);
    // The binaries as installed (/usr/local/bin, 0755): copied out of the checkout, which an
    // unprivileged user may not be able to enter (a CI checkout under /root).
    const binDir = path.join(dir, 'bin');
    fs.mkdirSync(binDir, { mode: 0o755 });
    for (const bin of ['fleetgate', 'fleetgate-agent']) {
      fs.copyFileSync(path.join(BIN_DIR, bin), path.join(binDir, bin));
      fs.chmodSync(path.join(binDir, bin), 0o755);
    }
    // In a private mount namespace: every mount but the kernel's API file systems read-only, then
    // the gateway as an unprivileged user with no capabilities and no_new_privs (each step execs
    // the next: the child's pid is the gateway's).
    const script = [
      // StateDirectory=fleetgate: the one writable directory, a mount of its own left writable.
      'mount --bind "$1/state" "$1/state"',
      'for m in $(awk \'{print $5}\' /proc/self/mountinfo | sort -u); do',
      '  case "$m" in /proc*|/sys*|/dev*|"$1/state") ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac',
      'done',
      'export STATE_DIRECTORY="$1/state"',
      'touch "$1/written" 2>/dev/null && { echo "the file system is still writable" >&2; exit 3; }',
      `exec /usr/bin/setpriv --no-new-privs --inh-caps=-all --bounding-set=-all --reuid=${NOBODY} --regid=${NOBODY} --clear-groups -- "$2" --config "$1/fleet.yaml"`,
    ].join('\n');
    const env = { ...process.env };
    delete env.FLEETGATE_AGENT_BIN; // the agent beside the gateway, as installed
    const child = spawn('/usr/bin/unshare', ['-m', '--propagation', 'private', '/bin/sh', '-c', script, 'sh', dir, path.join(binDir, 'fleetgate')], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env,
    });
    gw = new Gateway(child, dir, configPath);
    await gw.waitForListeners({ timeoutMs: 10000 });
  });
  after(async () => {
    try {
      if (gw) {
        const code = await gw.stop();
        assert.equal(code, 0, `the sandboxed gateway exits 0 on SIGTERM:\n${gw.stderrText.slice(-2000)}`);
      }
    } finally {
      removeDir(dir);
    }
  });

  test('it runs as an unprivileged user with no capabilities and no_new_privs', () => {
    const status = fs.readFileSync(`/proc/${gw.pid}/status`, 'utf8');
    const field = (name) => status.match(new RegExp(`^${name}:\\s*(.*)$`, 'm'))?.[1];
    assert.match(field('Name'), /fleetgate/);
    assert.equal(field('Uid').split(/\s+/)[0], String(NOBODY));
    assert.equal(field('Gid').split(/\s+/)[0], String(NOBODY));
    for (const caps of ['CapEff', 'CapPrm', 'CapBnd', 'CapAmb']) {
      assert.equal(BigInt(`0x${field(caps)}`), 0n, `${caps} is empty`);
    }
    assert.equal(field('NoNewPrivs'), '1');
  });

  test('its local phone starts, becomes healthy, and a chat request is answered', async () => {
    await eventually(async () => (await request(`${gw.adminUrl}/readyz`)).status === 200, { timeoutMs: 10000, what: '/readyz 200' });
    assert.equal((await request(`${gw.adminUrl}/healthz`)).status, 200);
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    assert.equal(res.status, 200, res.text);
    assert.ok(!gw.logs.some((l) => l.level === 'error'), `no error logged: ${JSON.stringify(gw.logs.filter((l) => l.level === 'error'))}`);
  });
});
