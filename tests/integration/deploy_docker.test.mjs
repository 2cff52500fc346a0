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
//    against a port that answers /healthz with 404.

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { validate } from 'dockerfile-utils';
import YAML from 'yaml';

import { DEPLOY_DIR, aptInstalls, stages } from './lib/deploy_util.mjs';
import { startFakeReplica } from './lib/fake_replica.mjs';
import { FLEETGATE_BIN, REPO_ROOT, startGateway, stopChecked } from './lib/gateway.mjs';

const DOCKERFILE = path.join(DEPLOY_DIR, 'docker', 'Dockerfile');
const BIN_DIR = path.dirname(FLEETGATE_BIN);
const BINARIES = ['fleetgate', 'fleetgate-agent'];
// In debian:bookworm-slim already: the C library and the GCC runtime (priority "required").
const IN_BASE_IMAGE = new Set(['libc6', 'libgcc-s1']);

const dockerText = () => fs.readFileSync(DOCKERFILE, 'utf8');

// The Debian packages that provide the shared libraries a binary loads (ldd, then dpkg -S).
function runtimePackages(binary) {
  const ldd = execFileSync('ldd', [binary], { encoding: 'utf8' });
  const pkgs = new Set();
  for (const line of ldd.split('\n')) {
    const m = line.match(/=>\s+(\/\S+)/) ?? line.match(/^\s*(\/\S+)\s+\(/);
    if (!m) {
      continue;
    }
    // Debian 12 is merged-/usr: dpkg may know the file under either name.
    const real = fs.realpathSync(m[1]);
    const candidates = [m[1], real, real.replace(/^\/usr/, ''), `/usr${m[1]}`];
    let owner = null;
    for (const file of candidates) {
      const r = spawnSync('dpkg', ['-S', file], { encoding: 'utf8' });
      if (r.status === 0) {
        owner = r.stdout.split(':')[0].trim();
        break;
      }
    }
    assert.ok(owner, `a Debian package provides ${m[1]} (${real})`);
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

  test("the final stage installs the Debian package of every shared library the binaries load", () => {
    const final = stages(dockerText()).at(-1);
    const installed = new Set(aptInstalls(final));
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
