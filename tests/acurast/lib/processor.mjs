// A fake Acurast processor (issue 12, item 7): it runs a project rendered by
// `fleetgate deploy acurast` as the Shell runtime would on a phone, here on 127.0.0.1.
//
//   - The project's `app` folder is zipped (the Acurast CLI zips `fileUrl`) and unzipped into a
//     temporary root; the unpacked files lose their modes (0644: a zip made by the CLI need not
//     keep them), so the entry script's own chmod is what makes the binaries runnable.
//   - This machine is x86 without binfmt_misc: each aarch64 ELF of the project is moved to
//     <root>/.cpu/ and replaced by a two-line shell script that execs it under
//     qemu-aarch64-static (the PID stays the same). That is the only change to the project; it
//     stands in for the phone's CPU. Everything else (start.sh, agent.yaml, manifest.json) runs
//     as rendered, with the host's /bin/sh in place of the distro image's.
//   - The environment is only what the runtime gives: PATH, HOME (<root>/root), TMPDIR
//     (<root>/tmp), BRIDGE_SOCKET, and the variables the project declares (.env.example's
//     uncommented names, which must equal acurast.json's includeEnvironmentVariables) with the
//     test's values. Nothing of the test's own environment leaks in.
//   - The bridge is tests/integration/lib/fake_bridge.mjs on an abstract Unix socket. Its tunnel
//     gives the URL the real network would (https://<8 hex of the key>.acu.run) and is a local TLS
//     front (a certificate for *.acu.run from a throw-away CA made by openssl) on 127.77.x.y:443
//     forwarding to the agent's localAddr while the tunnel is up; dropped or stopped, it forwards
//     nothing and cuts its open connections. The tunnel's host name goes into a hosts file that
//     gatewayPrefix() binds over /etc/hosts in the gateway's private mount namespace (root only),
//     so the gateway resolves it like any public name and verifies the certificate against the
//     CA given in its upstream.ca_file.
//   - The model is served by a local HTTP file server (with Range, as a CDN would).

import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';

import { findQemu, startLogged } from '../../integration/lib/aarch64.mjs';
import { startFakeBridge } from '../../integration/lib/fake_bridge.mjs';
import { FLEETGATE_BIN, REPO_ROOT } from '../../integration/lib/gateway.mjs';
import { writeRangeHead } from '../../integration/lib/range.mjs';

// PATH as the runtime sets it in a Debian-like distro image.
export const RUNTIME_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

// Why the fake processor cannot run here, or null. It needs root: a private mount namespace
// (unshare) for the gateway's /etc/hosts, and port 443 for the tunnel's front.
export function processorSkipReason() {
  if (process.getuid?.() !== 0) {
    return 'the fake Acurast processor needs root (a private mount namespace for the gateway\'s /etc/hosts, port 443 for the tunnel front)';
  }
  for (const tool of ['unshare', 'mount', 'zip', 'unzip', 'openssl']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} is missing (Debian: util-linux, mount, zip, unzip, openssl)`;
    }
  }
  return null;
}

// A throw-away CA and a leaf for *.acu.run and *.canary.acu.run (the tunnel's domains).
export function makeTunnelCerts(dir) {
  const run = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const p = (name) => path.join(dir, name);
  run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', p('tunnel-ca.key'), '-out', p('tunnel-ca.pem'), '-days', '2', '-subj', '/CN=Fake Acurast Relay Test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  fs.writeFileSync(p('tunnel.ext'),
    'subjectAltName=DNS:*.acu.run,DNS:*.canary.acu.run\nbasicConstraints=critical,CA:FALSE\n' +
    'keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n');
  run('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', p('tunnel.key'), '-out', p('tunnel.csr'), '-subj', '/CN=*.acu.run');
  run('x509', '-req', '-in', p('tunnel.csr'), '-CA', p('tunnel-ca.pem'), '-CAkey', p('tunnel-ca.key'),
    '-set_serial', '7001', '-out', p('tunnel.pem'), '-days', '2', '-extfile', p('tunnel.ext'));
  return {
    caFile: p('tunnel-ca.pem'),
    ca: fs.readFileSync(p('tunnel-ca.pem'), 'utf8'),
    cert: fs.readFileSync(p('tunnel.pem'), 'utf8'),
    key: fs.readFileSync(p('tunnel.key'), 'utf8'),
  };
}

// The tunnel's public side: TLS on 127.77.x.y:443 (a loopback address of its own, so the URL
// carries no port), plain TCP to the agent while open.
export async function startTunnelFront({ cert, key }) {
  const front = { target: null, forwarded: 0, refused: 0, live: new Set() };
  const server = tls.createServer({ cert, key }, (socket) => {
    socket.on('error', () => {});
    if (!front.target) {
      front.refused += 1;
      socket.destroy();
      return;
    }
    front.forwarded += 1;
    const [host, port] = [front.target.slice(0, front.target.lastIndexOf(':')), Number(front.target.slice(front.target.lastIndexOf(':') + 1))];
    const upstream = net.connect({ host, port });
    upstream.on('error', () => socket.destroy());
    socket.on('close', () => upstream.destroy());
    upstream.on('close', () => socket.destroy());
    front.live.add(socket);
    socket.on('close', () => front.live.delete(socket));
    socket.pipe(upstream).pipe(socket);
  });
  server.on('tlsClientError', () => {});
  for (let attempt = 0; ; ++attempt) {
    const ip = `127.77.${1 + Math.floor(Math.random() * 254)}.${1 + Math.floor(Math.random() * 254)}`;
    try {
      server.listen(443, ip);
      await once(server, 'listening');
      front.ip = ip;
      break;
    } catch (e) {
      if (e.code !== 'EADDRINUSE' || attempt > 20) {
        throw e;
      }
    }
  }
  front.open = (localAddr) => {
    front.target = localAddr;
  };
  front.cut = () => {
    front.target = null;
    for (const s of front.live) {
      s.destroy();
    }
  };
  front.close = async () => {
    front.cut();
    server.close();
    await once(server, 'close');
  };
  return front;
}

// Serves one file at /models/<name> with Range support; records requests.
export async function startFileServer(file) {
  const size = fs.statSync(file).size;
  const name = path.basename(file);
  const srv = { requests: [], bytesSent: 0 };
  srv.server = http.createServer((req, res) => {
    srv.requests.push({ url: req.url, range: req.headers.range ?? null, at: Date.now() });
    if (req.url !== `/models/${name}`) {
      res.writeHead(404).end();
      return;
    }
    const start = writeRangeHead(req, res, size);
    if (start === null) {
      return;
    }
    const stream = fs.createReadStream(file, { start });
    stream.on('data', (chunk) => {
      srv.bytesSent += chunk.length;
    });
    stream.pipe(res);
  });
  srv.server.listen(0, '127.0.0.1');
  await once(srv.server, 'listening');
  srv.url = `http://127.0.0.1:${srv.server.address().port}/models/${name}`;
  srv.close = async () => {
    srv.server.closeAllConnections();
    srv.server.close();
    await once(srv.server, 'close');
  };
  return srv;
}

// `fleetgate deploy acurast` on a fleet YAML, with the real aarch64 binaries of this checkout
// (build-aarch64/dist, .cache/llama-aarch64/bin) and the secrets set in its environment, as an
// operator runs it. Returns the project folder of the model.
export function renderProject({ configFile, out, model, env }) {
  execFileSync(FLEETGATE_BIN, ['deploy', 'acurast', '--config', configFile, '--out', out, '--source', REPO_ROOT, '--model', model],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], timeout: 60000 });
  return path.join(out, model);
}

// The names .env.example declares (uncommented NAME= lines).
export function declaredVariables(projectDir) {
  return fs.readFileSync(path.join(projectDir, '.env.example'), 'utf8').split('\n')
    .map((l) => /^([A-Za-z_][A-Za-z0-9_]*)=/.exec(l)?.[1]).filter(Boolean);
}

// Every file below dir (recursively).
export function listFiles(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    out.push(...(entry.isDirectory() ? listFiles(p) : [p]));
  }
  return out.sort();
}

function isElf(file) {
  const fd = fs.openSync(file, 'r');
  try {
    const b = Buffer.alloc(4);
    fs.readSync(fd, b, 0, 4, 0);
    return b.readUInt32BE(0) === 0x7f454c46;
  } finally {
    fs.closeSync(fd);
  }
}

// The hosts file the gateway sees as /etc/hosts (this machine's, plus the tunnels' names), and
// the command prefix that starts the gateway with it (same PID: unshare and sh exec).
export function makeHostsFile(dir) {
  const file = path.join(dir, 'hosts');
  fs.writeFileSync(file, `${fs.readFileSync('/etc/hosts', 'utf8').trimEnd()}\n# fake Acurast tunnels\n`);
  return file;
}
export function gatewayPrefix(hostsFile) {
  return ['unshare', '--mount', '--propagation', 'private', '--', '/bin/sh', '-c', 'mount --bind "$0" /etc/hosts && exec "$@"', hostsFile];
}

// Runs the project: unpack, environment, bridge, tunnel front, entry script. `values` holds the
// declared variables' values; every declared one must be given. Returns the processor:
// {root, app, bridge, front, proc (the entry script's process, which execs the agent: logs,
// text, waitForLog, stop, exited), startedAt, url (the tunnel URL once opened), stop(), close()}.
export async function startProcessor({ projectDir, root, values, hostsFile, certs, deploymentId }) {
  const acurast = JSON.parse(fs.readFileSync(path.join(projectDir, 'acurast.json'), 'utf8'));
  const project = Object.values(acurast.projects)[0];
  const declared = declaredVariables(projectDir);
  if (JSON.stringify([...declared].sort()) !== JSON.stringify([...project.includeEnvironmentVariables].sort())) {
    throw new Error(`.env.example declares ${declared} but acurast.json passes ${project.includeEnvironmentVariables}`);
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(projectDir, project.fileUrl, 'manifest.json'), 'utf8'));
  if (manifest.entrypoint !== project.entrypoint) {
    throw new Error(`manifest.json's entrypoint ${manifest.entrypoint} is not acurast.json's ${project.entrypoint}`);
  }

  // Upload and unpack: zip the fileUrl folder as the CLI does, unzip it on the "phone".
  fs.mkdirSync(root, { recursive: true });
  const zip = path.join(root, 'upload.zip');
  execFileSync('zip', ['-q', '-r', '-0', zip, '.'], { cwd: path.join(projectDir, project.fileUrl) });
  const app = path.join(root, 'deployment');
  fs.mkdirSync(app);
  execFileSync('unzip', ['-q', zip, '-d', app]);
  fs.rmSync(zip);
  const cpu = path.join(root, '.cpu');
  fs.mkdirSync(cpu);
  const qemu = findQemu();
  for (const file of listFiles(app)) {
    fs.chmodSync(file, 0o644);
    if (isElf(file)) {
      const real = path.join(cpu, path.basename(file));
      fs.renameSync(file, real);
      fs.chmodSync(real, 0o755);
      fs.writeFileSync(file, `#!/bin/sh\n# fake processor: the phone runs this aarch64 binary natively\nexec ${qemu} ${real} "$@"\n`, { mode: 0o644 });
    }
  }
  for (const d of ['root', 'tmp']) {
    fs.mkdirSync(path.join(root, d), { recursive: true });
  }

  const front = await startTunnelFront(certs);
  const processor = { root, app, front, url: null, deploymentId };
  processor.bridge = await startFakeBridge({
    deploymentId,
    onTunnel: (event, tunnel) => {
      if (event === 'start') {
        processor.url = tunnel.url;
        const host = new URL(tunnel.url).hostname;
        const hosts = fs.readFileSync(hostsFile, 'utf8');
        if (!hosts.includes(` ${host}\n`)) {
          fs.appendFileSync(hostsFile, `${front.ip} ${host}\n`);
        }
        front.open(tunnel.params.localAddr);
      } else {
        front.cut();
      }
    },
  });

  const env = { PATH: RUNTIME_PATH, HOME: path.join(root, 'root'), TMPDIR: path.join(root, 'tmp'), ...processor.bridge.env };
  for (const name of declared) {
    if (!values[name]) {
      throw new Error(`the project declares ${name} but the test gave no value`);
    }
    env[name] = values[name];
  }
  processor.env = env;
  processor.startedAt = Date.now();
  // The runtime's working folder is its own; the script changes into its folder itself.
  processor.proc = startLogged('/bin/sh', [path.join(app, project.entrypoint)], { env, cwd: root, name: 'fake processor (start.sh)' });
  let closed = false;
  processor.close = async () => {
    if (closed) {
      return;
    }
    closed = true;
    await processor.proc.stop({ timeoutMs: 20000 });
    await processor.bridge.close();
    await front.close();
  };
  return processor;
}
