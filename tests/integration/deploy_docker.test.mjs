// deploy/docker/Dockerfile (issue 15, section 5), checked statically: no Docker daemon (and no
// registry to pull debian:bookworm-slim from) is available where the tests run, so the image is
// NOT built here. What is checked instead:
//  - dockerfile-utils' validator (the VS Code Docker extension's) finds no problem in it, and does
//    find a mutated copy's misspelt instruction and flag;
//  - stages: a build stage and a final stage, both on Debian 12 (bookworm), no `latest`;
//  - the final stage runs as a non-root numeric user, copies nothing but the two binaries from the
//    build stage, installs no compiler or -dev package, and installs the Debian package of every
//    shared library `ldd` lists for this build's binaries (libc6 and libgcc-s1 are in the base);
//  - the build stage installs the library packages ./fleet installs, and builds both targets;
//  - EXPOSE matches config/example.yaml's listen ports; the HEALTHCHECK command, run here as
//    written (its port pointed at a test gateway), passes against the admin listener and fails
//    against a port that answers /healthz with 404;
//  - an emulated image (root only): a directory holding the files of the final stage's Debian
//    packages and of the base packages they and the HEALTHCHECK need (libc6, bash, coreutils,
//    grep..., dependencies resolved with dpkg on this Debian 12 machine, files copied from
//    `dpkg -L`), plus what the COPY lines copy; the Dockerfile's ENTRYPOINT and CMD then run in it
//    with chroot as its USER, the root read-only (as readOnlyRootFilesystem in deploy/k8s), and
//    must serve a chat request through a local simulated phone (the agent binary from the same
//    image), pass the HEALTHCHECK run in the same root, and exit 0 on SIGTERM. This is not
//    `docker build`: the base image's own files are approximated by those packages.

import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { validate } from 'dockerfile-utils';
import YAML from 'yaml';

import { DEPLOY_DIR, aptInstalls, stages } from './lib/deploy_util.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import { SANITIZE } from './lib/sanitize.mjs';
import { FLEETGATE_BIN, Gateway, REPO_ROOT, eventually, makeTempDir, postJson, removeDir, request, startGateway, stopChecked } from './lib/gateway.mjs';

const DOCKERFILE = path.join(DEPLOY_DIR, 'docker', 'Dockerfile');
const BIN_DIR = path.dirname(FLEETGATE_BIN);
const BINARIES = ['fleetgate', 'fleetgate-agent'];
// In debian:bookworm-slim already: the C library and the GCC runtime (priority "required").
const IN_BASE_IMAGE = new Set(['libc6', 'libgcc-s1']);

// The packages apt installs with `names`: each one and, recursively, what it depends on (the
// local dpkg database's Depends and Pre-Depends; alternatives count when any is installed here).
// libpq5 brings Kerberos, LDAP and GnuTLS libraries that the Dockerfile rightly does not name.
function withDependencies(names) {
  const seen = new Set();
  const todo = [...names];
  while (todo.length > 0) {
    const pkg = todo.pop();
    if (seen.has(pkg)) continue;
    seen.add(pkg);
    const r = spawnSync('dpkg-query', ['-W', '-f=${Depends}, ${Pre-Depends}', pkg], { encoding: 'utf8' });
    if (r.status !== 0) continue;
    for (const alt of r.stdout.split(',')) {
      for (const choice of alt.split('|')) {
        const name = choice.trim().split(/[\s:(]/)[0];
        if (name) todo.push(name);
      }
    }
  }
  return seen;
}

const dockerText = () => fs.readFileSync(DOCKERFILE, 'utf8');

// The Debian packages that provide the shared libraries a binary loads (ldd, then one dpkg -S).
function runtimePackages(binary) {
  const ldd = execFileSync('ldd', [binary], { encoding: 'utf8' });
  const libs = [];
  for (const line of ldd.split('\n')) {
    const m = line.match(/=>\s+(\/\S+)/) ?? line.match(/^\s*(\/\S+)\s+\(/);
    if (m) {
      libs.push(m[1]);
    }
  }
  // Debian 12 is merged-/usr: dpkg may know a file under /lib or /usr/lib. Ask for each name a
  // library has (the path ldd shows, its real path, both with and without /usr).
  const names = (lib) => {
    const real = fs.realpathSync(lib);
    return [...new Set([lib, real, real.replace(/^\/usr/, ''), `/usr${lib}`])];
  };
  const r = spawnSync('dpkg', ['-S', ...libs.flatMap(names)], { encoding: 'utf8' });
  const owners = new Map(); // file -> package
  for (const line of r.stdout.split('\n')) {
    const m = line.match(/^([^:,\s]+)(?::[a-z0-9]+)?: (\/\S+)$/);
    if (m) {
      owners.set(m[2], m[1]);
    }
  }
  const pkgs = new Set();
  for (const lib of libs) {
    const owner = names(lib).map((n) => owners.get(n)).find(Boolean);
    assert.ok(owner, `a Debian package provides ${lib}`);
    pkgs.add(owner);
  }
  return pkgs;
}

// What is wrong with the Dockerfile (static checks), as messages; [] when nothing is.
function dockerfileProblems(text) {
  const problems = [];
  const st = stages(text);
  if (st.length < 2) {
    problems.push(`a multi-stage build: ${st.length} stage(s)`);
    return problems;
  }
  for (const s of st) {
    if (s.from.image !== 'debian' || !/^(bookworm|12)(-slim)?$/.test(s.from.tag ?? '')) {
      problems.push(`FROM ${s.from.image}:${s.from.tag}: every stage on Debian 12 (debian:bookworm[-slim])`);
    }
  }
  const build = st.find((s) => s.from.stage);
  const final = st[st.length - 1];
  if (!build || build === final) {
    problems.push('a named build stage before the final one');
    return problems;
  }
  // Final stage: non-root, only the two binaries, runtime packages only.
  const users = final.instructions.filter((i) => i.keyword === 'USER');
  const user = users.at(-1)?.args[0] ?? 'root';
  const [uid] = user.split(':');
  if (!/^\d+$/.test(uid) || Number(uid) === 0) {
    problems.push(`the final stage's USER is a non-root numeric uid (Kubernetes' runAsNonRoot needs a number): ${user}`);
  }
  if (final.instructions.some((i) => i.keyword === 'ADD')) {
    problems.push('no ADD in the final stage');
  }
  const copied = [];
  for (const c of final.instructions.filter((i) => i.keyword === 'COPY')) {
    if (c.flags.from !== build.from.stage) {
      problems.push(`the final stage copies only from the build stage: COPY ${c.text}`);
    }
    copied.push(...c.args.slice(0, -1));
  }
  const names = copied.map((p) => path.posix.basename(p)).sort();
  if (JSON.stringify(names) !== JSON.stringify([...BINARIES].sort())) {
    problems.push(`the final stage copies exactly ${BINARIES.join(' and ')}: ${copied.join(' ')}`);
  }
  const finalPkgs = aptInstalls(final);
  for (const p of finalPkgs) {
    if (/-dev$|^(g\+\+|gcc|cmake|ninja-build|make|pkg-config|clang.*)$/.test(p)) {
      problems.push(`no build tool or -dev package in the final stage: ${p}`);
    }
  }
  const entry = final.instructions.find((i) => i.keyword === 'ENTRYPOINT');
  const dest = final.instructions.filter((i) => i.keyword === 'COPY').map((c) => c.args.at(-1))[0] ?? '';
  if (!entry || JSON.parse(entry.text)[0] !== path.posix.join(dest, 'fleetgate')) {
    problems.push(`ENTRYPOINT runs the copied gateway (${path.posix.join(dest, 'fleetgate')}): ${entry?.text}`);
  }
  if (!final.instructions.some((i) => i.keyword === 'HEALTHCHECK')) {
    problems.push('a HEALTHCHECK');
  }
  return problems;
}

describe('the Dockerfile (static: no Docker daemon here, the image is not built)', () => {
  test('dockerfile-utils finds no problem, and finds a misspelt instruction and flag', () => {
    assert.deepEqual(validate(dockerText()).map((d) => d.message), []);
    const bad = dockerText().replace('USER 10001', 'USR 10001').replace('--interval=', '--intervall=');
    const messages = validate(bad).map((d) => d.message);
    assert.ok(messages.some((m) => /USR/.test(m)) && messages.some((m) => /intervall/.test(m)), messages.join('\n'));
  });

  test('multi-stage on Debian 12, non-root, only the two binaries copied into the final stage', () => {
    assert.deepEqual(dockerfileProblems(dockerText()), []);
  });

  test('the static checks fail on a bad Dockerfile (root user, another base, an extra file, latest)', () => {
    const text = dockerText();
    const cases = [
      [text.replace('USER 10001:10001', 'USER root'), /non-root/],
      [text.replace(/\nUSER .*\n/, '\n'), /non-root/],
      [text.replace('FROM debian:bookworm-slim\n', 'FROM ubuntu:24.04\n'), /Debian 12/],
      [text.replace('FROM debian:bookworm-slim AS build', 'FROM debian:latest AS build'), /Debian 12/],
      [text.replace('COPY --from=build /src/build/bin/fleetgate ', 'COPY --from=build /src/build/bin/fleetgate /src/config/local.yaml '), /exactly/],
      [text.replace('COPY --from=build ', 'COPY '), /only from the build stage/],
      [text.replace('ca-certificates libssl3', 'ca-certificates libssl-dev libssl3'), /-dev/],
    ];
    for (const [mutated, expected] of cases) {
      assert.notEqual(mutated, text, `the mutation applies (${expected})`);
      const problems = dockerfileProblems(mutated);
      assert.ok(problems.some((p) => expected.test(p)), `${expected} in: ${problems.join(' | ')}`);
    }
  });

  // Under ./fleet test --sanitize the binaries also load libasan and libubsan, which no image has.
  const releaseBinaries = SANITIZE ? 'the binaries are the sanitized build (they load libasan and libubsan)' : false;
  test("the final stage installs the Debian package of every shared library the binaries load", { skip: releaseBinaries }, () => {
    const final = stages(dockerText()).at(-1);
    const installed = withDependencies(aptInstalls(final));
    assert.ok(installed.has('ca-certificates'), 'ca-certificates: the gateway and agent verify HTTPS peers against the system CAs');
    for (const bin of BINARIES) {
      const file = path.join(BIN_DIR, bin);
      assert.ok(fs.existsSync(file), `${file} is built`);
      const needed = [...runtimePackages(file)].filter((p) => !IN_BASE_IMAGE.has(p));
      assert.ok(needed.length >= 3, `${bin} loads shared libraries: ${needed}`);
      const absent = needed.filter((p) => !installed.has(p));
      assert.deepEqual(absent, [], `${bin} needs ${absent.join(', ')}, not installed in the final stage`);
    }
  });

  test("the build stage installs ./fleet's library packages and builds both binaries", () => {
    const build = stages(dockerText()).find((s) => s.from.stage);
    const installed = new Set(aptInstalls(build));
    const fleet = fs.readFileSync(path.join(REPO_ROOT, 'fleet'), 'utf8');
    const list = fleet.match(/^APT_PACKAGES=\(([^)]*)\)/m);
    assert.ok(list, "./fleet's APT_PACKAGES");
    const libs = list[1].split(/\s+/).filter((p) => /-dev$/.test(p) && !/^lib(gtest|gmock)-dev$/.test(p)); // tests are off
    assert.ok(libs.length >= 5, libs.join(' '));
    assert.deepEqual(libs.filter((p) => !installed.has(p)), [], 'library packages missing from the build stage');
    for (const tool of ['g++', 'cmake']) {
      assert.ok(installed.has(tool), tool);
    }
    const runs = build.instructions.filter((i) => i.keyword === 'RUN').map((i) => i.text).join('\n');
    assert.match(runs, /cmake --build build --target fleetgate fleetgate-agent/);
    assert.match(runs, /-DBUILD_TESTING=OFF/);
    // The build stage builds in /src/build, and CMakeLists.txt puts executables in <build>/bin:
    // that is where the final stage copies them from.
    assert.match(runs, /cmake -S \. -B build /);
    assert.match(fs.readFileSync(path.join(REPO_ROOT, 'CMakeLists.txt'), 'utf8'), /set\(CMAKE_RUNTIME_OUTPUT_DIRECTORY \$\{CMAKE_BINARY_DIR\}\/bin\)/);
    assert.ok(build.instructions.some((i) => i.keyword === 'WORKDIR' && i.args[0] === '/src'), 'WORKDIR /src');
    assert.match(dockerText(), /COPY --from=build \/src\/build\/bin\/fleetgate \/src\/build\/bin\/fleetgate-agent /);
  });

  test("EXPOSE lists config/example.yaml's listen ports", () => {
    const final = stages(dockerText()).at(-1);
    const exposed = final.instructions.filter((i) => i.keyword === 'EXPOSE').flatMap((i) => i.args).map(Number).sort();
    const example = YAML.parse(fs.readFileSync(path.join(REPO_ROOT, 'config', 'example.yaml'), 'utf8'));
    const ports = [example.server.listen, example.admin.listen].map((a) => Number(a.split(':').at(-1))).sort();
    assert.deepEqual(exposed, ports);
  });
});

describe("the Dockerfile's HEALTHCHECK command, run here against a gateway", () => {
  let fake;
  let gw;
  let argv;
  let port;
  before(async () => {
    const hc = stages(dockerText()).at(-1).instructions.find((i) => i.keyword === 'HEALTHCHECK');
    const m = hc.text.match(/^CMD\s+(\[.*\])$/s);
    assert.ok(m, `HEALTHCHECK CMD in exec form: ${hc.text}`);
    argv = JSON.parse(m[1]);
    const example = YAML.parse(fs.readFileSync(path.join(REPO_ROOT, 'config', 'example.yaml'), 'utf8'));
    port = example.admin.listen.split(':').at(-1);
    assert.ok(argv.join(' ').includes(`127.0.0.1/${port}`), `the healthcheck asks the default admin port ${port}`);
    fake = await startFakeReplica({ name: 'r' });
    gw = await startGateway({ models: [{ name: 'm', endpoints: [fake.url] }] });
  });
  after(async () => {
    await stopChecked(gw);
    await fake?.close();
  });

  const run = (adminHostPort) => {
    const [, p] = adminHostPort.split(':');
    const args = argv.map((a) => a.replaceAll(`127.0.0.1/${port}`, `127.0.0.1/${p}`));
    return spawnSync(args[0], args.slice(1), { encoding: 'utf8', timeout: 10000 });
  };

  test('passes when the admin listener answers /healthz', () => {
    const r = run(new URL(gw.adminUrl).host);
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  });

  test('fails when the port answers something else (the public listener: /healthz is 404 there)', () => {
    const r = run(new URL(gw.publicUrl).host);
    assert.notEqual(r.status, 0);
  });
});

// ---- an emulated image: the final stage's files in a directory, run with chroot -------------

function emulationMissing() {
  if (process.getuid?.() !== 0) {
    return 'needs root (chroot, a mount namespace)';
  }
  for (const bin of ['/usr/bin/unshare', '/usr/sbin/chroot', '/usr/bin/dpkg-query']) {
    if (!fs.existsSync(bin)) {
      return `${bin} is missing`;
    }
  }
  const r = spawnSync('/usr/bin/unshare', ['-m', '--propagation', 'private', 'true'], { encoding: 'utf8' });
  return r.status === 0 ? null : `no mount namespace here: ${r.stderr.trim()}`;
}

// Installed packages and everything they depend on (Depends, Pre-Depends; of alternatives the
// first one installed), by dpkg on this machine.
function dependencyClosure(roots) {
  const installed = new Map(); // package -> its dependency groups
  const all = execFileSync('dpkg-query', ['-W', '-f=${Package}\t${Status}\t${Depends}, ${Pre-Depends}\n'], { encoding: 'utf8' });
  for (const line of all.split('\n')) {
    const [pkg, status, deps] = line.split('\t');
    if (status?.includes('ok installed')) {
      installed.set(pkg, deps.split(',').map((d) => d.trim()).filter(Boolean));
    }
  }
  const seen = new Set();
  const queue = [...roots];
  while (queue.length > 0) {
    const pkg = queue.shift();
    if (seen.has(pkg)) {
      continue;
    }
    assert.ok(installed.has(pkg), `${pkg} is installed on this machine`);
    seen.add(pkg);
    for (const group of installed.get(pkg)) {
      const alts = group.split('|').map((a) => a.replace(/\(.*?\)/g, '').replace(/:any$/, '').trim());
      const first = alts.find((a) => installed.has(a));
      if (first) {
        queue.push(first);
      }
    }
  }
  return [...seen];
}

// Copies a package's files (dpkg -L) into root, on Debian 12's merged /usr (directories are
// resolved on this machine: /lib/x/y lands in usr/lib/x/y). Documentation is left out.
function copyPackage(pkg, root) {
  const list = execFileSync('dpkg', ['-L', pkg], { encoding: 'utf8' }).split('\n').filter(Boolean);
  for (const file of list) {
    if (/^\/usr\/share\/(doc|man|info|locale|lintian)\//.test(file) || !fs.existsSync(path.dirname(file))) {
      continue;
    }
    let st;
    try {
      st = fs.lstatSync(file);
    } catch {
      continue; // diverted or removed
    }
    const dest = path.join(root, fs.realpathSync(path.dirname(file)), path.basename(file));
    if (st.isDirectory()) {
      fs.mkdirSync(path.join(root, fs.realpathSync(file)), { recursive: true });
    } else if (!fs.existsSync(dest) && !isLink(dest)) {
      fs.mkdirSync(path.dirname(dest), { recursive: true });
      if (st.isSymbolicLink()) {
        fs.symlinkSync(fs.readlinkSync(file), dest);
      } else if (st.isFile()) {
        fs.copyFileSync(file, dest);
        fs.chmodSync(dest, st.mode & 0o7777);
      }
    }
  }
}

function isLink(file) {
  try {
    return fs.lstatSync(file).isSymbolicLink();
  } catch {
    return false;
  }
}

const noEmulation = SANITIZE
  ? 'the binaries are the sanitized build (they load libasan and libubsan, which the image has not)'
  : emulationMissing();
if (noEmulation) {
  console.log(`# deploy_docker: the emulated image is SKIPPED: ${noEmulation}`);
}

describe('an emulated image: the final stage\'s files, its ENTRYPOINT and CMD under chroot (not docker build)', { skip: noEmulation ?? false }, () => {
  let root;
  let gw;
  let uid;
  let gid;
  let healthArgv;
  let packages;

  before(async () => {
    const final = stages(dockerText()).at(-1);
    [uid, gid] = final.instructions.filter((i) => i.keyword === 'USER').at(-1).args[0].split(':').map(Number);
    const hc = final.instructions.find((i) => i.keyword === 'HEALTHCHECK');
    healthArgv = JSON.parse(hc.text.replace(/^CMD\s+/, ''));
    // The base image's packages this relies on: the C library and GCC runtime, and what the
    // HEALTHCHECK runs (bash, head, grep).
    packages = dependencyClosure([...aptInstalls(final), ...IN_BASE_IMAGE, 'bash', 'coreutils', 'grep']);
    root = makeTempDir('fleetgate-image-');
    fs.chmodSync(root, 0o755);
    for (const dir of ['usr/bin', 'usr/sbin', 'usr/lib', 'usr/lib64', 'etc', 'proc', 'dev', 'tmp']) {
      fs.mkdirSync(path.join(root, dir), { recursive: true });
    }
    for (const link of ['bin', 'sbin', 'lib', 'lib64']) {
      fs.symlinkSync(`usr/${link}`, path.join(root, link));
    }
    for (const pkg of packages) {
      copyPackage(pkg, root);
    }
    // ca-certificates' bundle is made by its postinst (update-ca-certificates), not shipped.
    if (packages.includes('ca-certificates')) {
      fs.mkdirSync(path.join(root, 'etc/ssl/certs'), { recursive: true });
      fs.copyFileSync('/etc/ssl/certs/ca-certificates.crt', path.join(root, 'etc/ssl/certs/ca-certificates.crt'));
    }
    // The COPY lines: /src/build/bin/X is this build's X.
    for (const c of final.instructions.filter((i) => i.keyword === 'COPY')) {
      const dest = c.args.at(-1);
      for (const src of c.args.slice(0, -1)) {
        assert.match(src, /^\/src\/build\/bin\//);
        const target = path.join(root, dest, path.posix.basename(src));
        fs.mkdirSync(path.dirname(target), { recursive: true });
        fs.copyFileSync(path.join(BIN_DIR, path.posix.basename(src)), target);
        fs.chmodSync(target, 0o755);
      }
    }
    // The user the RUN line adds, and the configuration an operator mounts.
    fs.appendFileSync(path.join(root, 'etc/passwd'), `root:x:0:0:root:/root:/bin/bash\nfleetgate:x:${uid}:${gid}::/nonexistent:/usr/sbin/nologin\n`);
    fs.appendFileSync(path.join(root, 'etc/group'), `root:x:0:\nfleetgate:x:${gid}:\n`);
    const entry = JSON.parse(final.instructions.find((i) => i.keyword === 'ENTRYPOINT').text);
    const cmd = JSON.parse(final.instructions.find((i) => i.keyword === 'CMD').text);
    const configPath = cmd[cmd.indexOf('--config') + 1];
    fs.mkdirSync(path.join(root, path.dirname(configPath)), { recursive: true });
    fs.writeFileSync(
      path.join(root, configPath),
      ['server: {listen: 127.0.0.1:0}', 'admin: {listen: 127.0.0.1:0}', 'models: [{name: m, local: {count: 1, profile: fast-test, time_scale: 20}}]', ''].join('\n'),
    );
    // A private mount namespace: /proc and /dev as a container runtime provides them, the root
    // read-only, /tmp a tmpfs (the emptyDir of deploy/k8s); then chroot as the image's USER.
    const script = [
      'set -e',
      'mount --bind "$1" "$1"',
      'mount -o remount,bind,ro "$1"',
      'mount -t proc proc "$1/proc"',
      'mount --rbind /dev "$1/dev"',
      'mount -t tmpfs -o mode=1777,size=16m tmpfs "$1/tmp"',
      // The image's VOLUME (the batch database under $STATE_DIRECTORY), writable by its USER.
      `mount -t tmpfs -o mode=0750,uid=${uid},gid=${gid},size=16m tmpfs "$1/var/lib/fleetgate"`,
      'shift',
      'exec /usr/sbin/chroot "$@"',
    ].join('\n');
    fs.mkdirSync(path.join(root, 'var/lib/fleetgate'), { recursive: true });
    // The final stage's ENV lines, as the container runtime sets them.
    const imageEnv = Object.fromEntries(
      final.instructions.filter((i) => i.keyword === 'ENV').map((i) => i.text.split('=')).map(([k, ...v]) => [k.trim(), v.join('=').trim()]),
    );
    assert.equal(imageEnv.STATE_DIRECTORY, '/var/lib/fleetgate', 'the image names its state directory');
    const child = spawn('/usr/bin/unshare', ['-m', '--propagation', 'private', '/bin/sh', '-c', script, 'sh', root, `--userspec=${uid}:${gid}`, root, ...entry, ...cmd], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', ...imageEnv }, // a container's, not this test's
    });
    gw = new Gateway(child, null, path.join(root, configPath));
    await gw.waitForListeners({ timeoutMs: 15000 });
  });
  after(async () => {
    try {
      if (gw) {
        const code = await gw.stop();
        assert.equal(code, 0, `the gateway in the emulated image exits 0 on SIGTERM:\n${gw.stderrText.slice(-2000)}`);
      }
    } finally {
      if (root) {
        removeDir(root);
      }
    }
  });

  test('the gateway runs as the image user and serves a chat request through its local agent', async () => {
    console.log(`# emulated image: ${packages.length} Debian packages: ${packages.join(' ')}`);
    const status = fs.readFileSync(`/proc/${gw.pid}/status`, 'utf8');
    assert.match(status, new RegExp(`^Uid:\\s+${uid}\\b`, 'm'));
    assert.match(status, /^CapEff:\s+0+$/m);
    await eventually(async () => (await request(`${gw.adminUrl}/readyz`)).status === 200, { timeoutMs: 10000, what: '/readyz 200' });
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    assert.equal(res.status, 200, res.text);
    assert.ok(gw.logs.some((l) => l.msg === 'local agent started'), 'fleetgate-agent started from the image');
  });

  test('the HEALTHCHECK passes, run in the image as its user', () => {
    const port = new URL(gw.adminUrl).port;
    const argv = healthArgv.map((a) => a.replace(/127\.0\.0\.1\/\d+/, `127.0.0.1/${port}`));
    const r = spawnSync('/usr/sbin/chroot', [`--userspec=${uid}:${gid}`, root, ...argv], { encoding: 'utf8', timeout: 10000 });
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  });
});
