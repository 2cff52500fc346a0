// A fake Acurast bridge: the host services of the Shell runtime, JSON-RPC 2.0 over an abstract
// Unix socket (one request line, one response line, then the connection closes), as
// ../shared/acurast.md describes. Reused by the agent's tunnel tests and the fake processor
// (tests/acurast/).
//
//   const bridge = await startFakeBridge({ deploymentId: 'dep-1' });
//   spawn(agent, { env: { ...bridge.env } });          // BRIDGE_SOCKET=<name>
//   await bridge.waitFor(() => bridge.tunnel.up);
//   bridge.dropTunnel();                               // tunnel_status now says down
//   bridge.calls                                       // every call: {method, params, at}
//   await bridge.close();
//
// Node binds an abstract name padded with NULs to the whole sun_path (ss -xl shows it as
// @name@@@...); the agent connects to the exact name first, then to the padded one.
//
// tunnel_status answers {"state": N}: 0 stopped (never started, dropped or stopped), 1 connecting,
// 2 connected, 3 failed. By default tunnel_start answers with the URL the real network would give
// (https://<first 8 hex of sha256(compressed P-256 public key)>.<domainSuffix>); a test that wants
// the gateway to reach the agent passes urlFor (for example params => `http://${params.localAddr}`,
// or a local TLS front). onTunnel(event, tunnel) is told of every change, so such a front can
// follow the tunnel: 'start' (after a successful tunnel_start), 'drop' (dropTunnel()) and 'stop'
// (tunnel_stop).

import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import net from 'node:net';

export const TUNNEL_STOPPED = 0;
export const TUNNEL_CONNECTING = 1;
export const TUNNEL_CONNECTED = 2;
export const TUNNEL_FAILED = 3;

// A fresh P-256 key as the agent's tunnel key variable holds it: base64 of the PKCS#8 DER.
export function makeTunnelKey() {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64');
}

// The public URL the Acurast network derives from a tunnel key (base64 PKCS#8 P-256).
export function tunnelUrlForKey(keyBase64, domainSuffix = 'acu.run') {
  const key = createPrivateKey({ key: Buffer.from(keyBase64, 'base64'), format: 'der', type: 'pkcs8' });
  const jwk = createPublicKey(key).export({ format: 'jwk' });
  const x = Buffer.from(jwk.x, 'base64url');
  const y = Buffer.from(jwk.y, 'base64url');
  const compressed = Buffer.concat([Buffer.from([y[y.length - 1] & 1 ? 0x03 : 0x02]), x]);
  const id = createHash('sha256').update(compressed).digest('hex').slice(0, 8);
  return `https://${id}.${domainSuffix}`;
}

// Starts the bridge. Options: deploymentId, processorVersion, urlFor(params) -> url (default: the
// key-derived URL), failStart (tunnel_start answers a JSON-RPC error while true; settable later
// on the returned object), statusAfterStart (the state tunnel_status reports once started,
// default 2), onTunnel(event, tunnel) (see above; settable later too).
export async function startFakeBridge({
  deploymentId = `dep-${randomBytes(4).toString('hex')}`,
  processorVersion = '1.12.0',
  urlFor = null,
  failStart = false,
  statusAfterStart = TUNNEL_CONNECTED,
  onTunnel = null,
} = {}) {
  const name = `fleetgate-bridge-${process.pid}-${randomBytes(6).toString('hex')}`;
  const bridge = {
    name,
    env: { BRIDGE_SOCKET: name },
    deploymentId,
    processorVersion,
    failStart,
    calls: [],
    // up: the last tunnel_start succeeded and it was neither dropped nor stopped.
    tunnel: { up: false, state: TUNNEL_STOPPED, params: null, url: null, starts: 0, stops: 0 },
    urlFor,
    onTunnel,
    dropTunnel() {
      bridge.tunnel.up = false;
      bridge.tunnel.state = TUNNEL_STOPPED;
      bridge.onTunnel?.('drop', bridge.tunnel);
    },
    countCalls(method) {
      return bridge.calls.filter((c) => c.method === method).length;
    },
    // Polls cond every 20 ms until it is true; rejects after timeoutMs.
    async waitFor(cond, timeoutMs = 10000, what = 'condition') {
      const deadline = Date.now() + timeoutMs;
      while (!cond()) {
        if (Date.now() > deadline) {
          throw new Error(`fake bridge: ${what} not met in ${timeoutMs} ms; calls: ${JSON.stringify(bridge.calls.map((c) => c.method))}`);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };

  function answer(request) {
    const { method, params = {} } = request;
    switch (method) {
      case 'deployment_id':
        return { result: bridge.deploymentId };
      case 'processor_version':
        return { result: bridge.processorVersion };
      case 'tunnel_start': {
        if (bridge.failStart) {
          return { error: { code: -32000, message: 'relay unreachable' } };
        }
        const key = params.primaryKey;
        if (!Array.isArray(params.serverAddrs) || typeof params.localAddr !== 'string' ||
            typeof params.domainSuffix !== 'string' || !key || key.algorithm !== 'Secp256r1' ||
            typeof key.bytes !== 'string') {
          return { error: { code: -32602, message: 'invalid params' } };
        }
        let url;
        try {
          url = bridge.urlFor ? bridge.urlFor(params) : tunnelUrlForKey(key.bytes, params.domainSuffix);
        } catch (e) {
          return { error: { code: -32602, message: `bad key: ${e.message}` } };
        }
        bridge.tunnel = { ...bridge.tunnel, up: true, state: statusAfterStart, params, url, starts: bridge.tunnel.starts + 1 };
        bridge.onTunnel?.('start', bridge.tunnel);
        return { result: { url, clientId: `client-${bridge.tunnel.starts}` } };
      }
      case 'tunnel_status':
        return { result: { state: bridge.tunnel.state } };
      case 'tunnel_stop':
        bridge.tunnel.up = false;
        bridge.tunnel.state = TUNNEL_STOPPED;
        bridge.tunnel.stops += 1;
        bridge.onTunnel?.('stop', bridge.tunnel);
        return { result: null };
      default:
        return { error: { code: -32601, message: `method not found: ${method}` } };
    }
  }

  const server = net.createServer((socket) => {
    let buffer = '';
    socket.setEncoding('utf8');
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      buffer += chunk;
      const newline = buffer.indexOf('\n');
      if (newline < 0) {
        if (buffer.length > 1 << 20) {
          socket.destroy();
        }
        return;
      }
      let request;
      let reply;
      try {
        request = JSON.parse(buffer.slice(0, newline));
      } catch {
        reply = { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } };
      }
      if (request) {
        bridge.calls.push({ method: request.method, params: request.params, at: Date.now() });
        reply = { jsonrpc: '2.0', id: request.id ?? null, ...answer(request) };
      }
      socket.end(`${JSON.stringify(reply)}\n`);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(`\0${name}`, resolve);
  });
  return bridge;
}
