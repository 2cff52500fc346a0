// `fleetgate deploy acurast` (issue 12, item 3): the CLI renders the Acurast project of each model
// with a deploy.acurast section from the gateway's own YAML, validates it against the Acurast
// CLI's schema (--check writes nothing), copies the aarch64 binaries (or says clearly that they
// are missing), never writes a secret, refuses a bad YAML with file, line and key, and --renew
// renders the next generation. The gateway itself accepts the same file.

import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { FLEETGATE_BIN, makeTempDir, removeDir } from './lib/gateway.mjs';

const SHA = 'ab'.repeat(32);
const SECRETS = {
  FG_IT_REG_TOKEN: 'registration-token-value-3e9d1a77',
  FG_IT_PHONE_KEY: 'phone-api-key-value-5c2b8f01',
  FLEETGATE_TUNNEL_KEY: 'tunnel-key-value-MIGHAgEAMBMGByqGSM49',
};

function fleetYaml({ replicas = 3, network = 'mainnet', modelFile = `{url: "https://models.example.com/m.gguf", sha256: ${SHA}}` } = {}) {
  return [
    'registration:',
    '  token_env: FG_IT_REG_TOKEN',
    '  allowed_urls: ["https://*.acu.run"]',
    'upstream: {api_key_env: FG_IT_PHONE_KEY}',
    'models:',
    '  - name: qwen3.5-0.8b',
    `    replicas: ${replicas}`,
    '    slots: 4',
    '    deploy:',
    '      acurast:',
    `        network: ${network}`,
    '        gateway_url: https://gw.example.com:9090',
    `        model_file: ${modelFile}`,
    '        max_cost_per_execution: 1000000000000',
    '        min_ram_bytes: 8000000000',
    '  - name: plain',
    '    endpoints: ["http://127.0.0.1:7001"]',
    '',
  ].join('\n');
}

function run(args, { env = {} } = {}) {
  return new Promise((resolve) => {
    execFile(FLEETGATE_BIN, args, { env: { ...process.env, ...SECRETS, ...env }, timeout: 15000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

function listFiles(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      out.push(...listFiles(p));
    } else {
      out.push(p);
    }
  }
  return out.sort();
}

describe('fleetgate deploy acurast', () => {
  let dir;
  let source; // a checkout-like folder with stand-in aarch64 binaries
  let config;

  before(() => {
    dir = makeTempDir('fleetgate-deploy-');
    config = path.join(dir, 'fleet.yaml');
    fs.writeFileSync(config, fleetYaml());
    source = path.join(dir, 'src');
    fs.mkdirSync(path.join(source, 'build-aarch64/dist'), { recursive: true });
    fs.mkdirSync(path.join(source, '.cache/llama-aarch64/bin'), { recursive: true });
    fs.writeFileSync(path.join(source, 'build-aarch64/dist/fleetgate-agent'), 'agent-binary');
    fs.writeFileSync(path.join(source, '.cache/llama-aarch64/bin/llama-server'), 'llama-binary');
  });

  after(() => removeDir(dir));

  test('renders the project, copies the binaries, writes no secret', async () => {
    const out = path.join(dir, 'out');
    const r = await run(['deploy', 'acurast', '--config', config, '--out', out, '--source', source]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /qwen3\.5-0\.8b: generation 1, 3 phones in 1 project/);
    const root = path.join(out, 'qwen3.5-0.8b');
    const files = listFiles(root).map((f) => path.relative(root, f));
    assert.deepEqual(files, [
      '.env.example', 'acurast.json', 'app/agent.yaml', 'app/fleetgate-agent', 'app/llama-server',
      'app/manifest.json', 'app/start.sh', 'deployment.json',
    ]);
    assert.ok(!fs.existsSync(path.join(out, 'plain')), 'a model without deploy.acurast renders nothing');
    const acurast = JSON.parse(fs.readFileSync(path.join(root, 'acurast.json'), 'utf8'));
    const project = acurast.projects['fleetgate-qwen3.5-0.8b-g1'];
    assert.equal(project.numberOfReplicas, 3);
    assert.equal(project.runtime, 'Shell');
    assert.equal(project.onlyAttestedDevices, true);
    assert.deepEqual(project.assignmentStrategy, { type: 'Single' });
    assert.deepEqual(project.benchmarkFilters, { minRamTotalBytes: 8000000000 });
    assert.deepEqual(project.includeEnvironmentVariables, ['FG_IT_REG_TOKEN', 'FG_IT_PHONE_KEY']);
    const manifest = JSON.parse(fs.readFileSync(path.join(root, 'app/manifest.json'), 'utf8'));
    assert.deepEqual(manifest.image, project.image);
    for (const f of ['app/start.sh', 'app/fleetgate-agent', 'app/llama-server']) {
      assert.ok((fs.statSync(path.join(root, f)).mode & 0o111) !== 0, `${f} is executable`);
    }
    assert.equal(fs.readFileSync(path.join(root, 'app/fleetgate-agent'), 'utf8'), 'agent-binary');
    // No rendered file holds a secret's value, though the CLI ran with all of them set.
    for (const f of listFiles(root)) {
      const text = fs.readFileSync(f, 'utf8');
      for (const [name, value] of Object.entries(SECRETS)) {
        assert.ok(!text.includes(value), `${path.relative(root, f)} contains ${name}'s value`);
      }
    }
    const env = fs.readFileSync(path.join(root, '.env.example'), 'utf8');
    assert.match(env, /^FG_IT_REG_TOKEN=$/m);
    assert.match(env, /^FG_IT_PHONE_KEY=$/m);
    // The gateway itself accepts the file that describes the deployment.
    const gw = await run(['--config', config, '--check']);
    assert.equal(gw.code, 0, gw.stderr);
  });

  test('--check validates and writes nothing; --model picks one model', async () => {
    const out = path.join(dir, 'checked');
    const r = await run(['deploy', 'acurast', '--config', config, '--out', out, '--check', '--model', 'qwen3.5-0.8b']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /qwen3\.5-0\.8b: ok \(1 project, 3 phones, generation 1\)/);
    assert.ok(!fs.existsSync(out));
    const plain = await run(['deploy', 'acurast', '--config', config, '--check', '--model', 'plain']);
    assert.equal(plain.code, 1);
    assert.match(plain.stderr, /model 'plain' has no deploy\.acurast section/);
    const none = await run(['deploy', 'acurast', '--config', config, '--check', '--model', 'nope']);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /no model named 'nope'/);
  });

  test('missing binaries are a clear error, unless --no-binaries', async () => {
    const empty = path.join(dir, 'empty-src');
    fs.mkdirSync(empty, { recursive: true });
    const out = path.join(dir, 'nobin');
    const r = await run(['deploy', 'acurast', '--config', config, '--out', out, '--source', empty]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /build-aarch64\/dist\/fleetgate-agent is missing: build it with \.\/fleet build --target aarch64/);
    const ok = await run(['deploy', 'acurast', '--config', config, '--out', out, '--source', empty, '--no-binaries']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.ok(fs.existsSync(path.join(out, 'qwen3.5-0.8b/app/start.sh')));
    assert.ok(!fs.existsSync(path.join(out, 'qwen3.5-0.8b/app/fleetgate-agent')));
  });

  test('--renew renders the next generation, starting before the last one ends', async () => {
    const out = path.join(dir, 'renew');
    assert.equal((await run(['deploy', 'acurast', '--config', config, '--out', out, '--no-binaries'])).code, 0);
    const first = JSON.parse(fs.readFileSync(path.join(out, 'qwen3.5-0.8b/deployment.json'), 'utf8'));
    assert.equal(first.generation, 1);
    const r = await run(['deploy', 'acurast', '--config', config, '--out', out, '--no-binaries', '--renew']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /generation 2/);
    const next = JSON.parse(fs.readFileSync(path.join(out, 'qwen3.5-0.8b/deployment.json'), 'utf8'));
    assert.equal(next.generation, 2);
    assert.deepEqual(next.projects, ['fleetgate-qwen3.5-0.8b-g2']);
    assert.equal(Date.parse(next.starts_at), Date.parse(first.ends_at) - 3600_000, 'starts renew_overlap (1h) before the first ends');
    const acurast = JSON.parse(fs.readFileSync(path.join(out, 'qwen3.5-0.8b/acurast.json'), 'utf8'));
    assert.deepEqual(acurast.projects['fleetgate-qwen3.5-0.8b-g2'].startAt, { timestamp: next.starts_at });
    const fresh = await run(['deploy', 'acurast', '--config', config, '--out', path.join(dir, 'never'), '--renew']);
    assert.equal(fresh.code, 1);
    assert.match(fresh.stderr, /render the first deployment .* without --renew/);
  });

  test('the entry script prepares the folder and execs the agent with its YAML, as the Shell runtime starts it', async () => {
    // A stand-in agent records how it was started. The runtime sets PATH and HOME=/root (not
    // writable here: HOME is honoured as given) and BRIDGE_SOCKET; TMPDIR is the script's job.
    const out = path.join(dir, 'entry');
    const r = await run(['deploy', 'acurast', '--config', config, '--out', out, '--no-binaries']);
    assert.equal(r.code, 0, r.stderr);
    const app = path.join(out, 'qwen3.5-0.8b/app');
    const record = path.join(dir, 'entry-record.json');
    fs.writeFileSync(path.join(app, 'fleetgate-agent'),
      `#!/bin/sh\nprintf '{"args":"%s","cwd":"%s","tmpdir":"%s","home":"%s","bridge":"%s","certs":"%s"}' "$*" "$PWD" "$TMPDIR" "$HOME" "$BRIDGE_SOCKET" "\${SSL_CERT_FILE:-}" > ${JSON.stringify(record)}\nexec sleep 0\n`);
    fs.writeFileSync(path.join(app, 'llama-server'), '#!/bin/sh\nexit 0\n');
    const home = path.join(dir, 'entry-home');
    fs.mkdirSync(home);
    const res = spawnSync('/bin/sh', [path.join(app, 'start.sh')], {
      cwd: dir, // the runtime's working folder is not the app's: the script changes into it
      env: { PATH: '/usr/bin:/bin', HOME: home, BRIDGE_SOCKET: 'fleetgate-test-bridge' },
      encoding: 'utf8',
      timeout: 10000,
    });
    assert.equal(res.status, 0, res.stderr);
    const seen = JSON.parse(fs.readFileSync(record, 'utf8'));
    assert.equal(seen.args, '--config ./agent.yaml');
    assert.equal(fs.realpathSync(seen.cwd), fs.realpathSync(app));
    assert.equal(seen.tmpdir, path.join(seen.cwd, 'tmp'));
    assert.ok(fs.statSync(path.join(app, 'tmp')).isDirectory() && fs.statSync(path.join(app, 'models')).isDirectory());
    assert.equal(seen.home, home);
    assert.equal(seen.bridge, 'fleetgate-test-bridge', 'the bridge socket reaches the agent');
    // The image's CA bundle is named for the static agent's OpenSSL (its own default is Debian's
    // /usr/lib/ssl, which an image may lack).
    const bundle = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem'].find((f) => fs.existsSync(f));
    assert.equal(seen.certs, bundle ?? '', 'SSL_CERT_FILE names the image\'s CA bundle');
    for (const f of ['fleetgate-agent', 'llama-server']) {
      assert.ok((fs.statSync(path.join(app, f)).mode & 0o111) !== 0, `${f} made executable`);
    }
  });

  test('a bad YAML is refused with its file, line and key', async () => {
    const cases = [
      [{ modelFile: '{url: "https://models.example.com/m.gguf"}' }, /bad\.yaml:13: models\[0\]\.deploy\.acurast\.model_file\.sha256: missing/],
      [{ modelFile: `{sha256: ${SHA}}` }, /bad\.yaml:13: models\[0\]\.deploy\.acurast\.model_file\.url: missing/],
      [{ replicas: 0 }, /bad\.yaml:7: models\[0\]\.replicas: must be at least 1/],
      [{ network: 'testnet' }, /bad\.yaml:11: models\[0\]\.deploy\.acurast\.network: .*testnet/],
    ];
    for (const [options, message] of cases) {
      const file = path.join(dir, 'bad.yaml');
      fs.writeFileSync(file, fleetYaml(options));
      const r = await run(['deploy', 'acurast', '--config', file, '--check']);
      assert.equal(r.code, 1, JSON.stringify(options));
      assert.match(r.stderr.replace(/.*\//, ''), message, r.stderr);
      const gw = await run(['--config', file, '--check']);
      assert.equal(gw.code, 1, 'the gateway refuses it too');
    }
    const usage = await run(['deploy', 'acurast', '--out', dir]);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--config FILE is required/);
  });
});
