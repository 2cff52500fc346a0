// deploy/k8s/ (issue 15, section 5), parsed with npm yaml and checked against:
//  - Kubernetes' API types (npm kubernetes-types, generated from Kubernetes' OpenAPI spec),
//    type-checked by the TypeScript compiler (lib/ts_check.mjs): a misspelt field or a string
//    port is an error;
//  - the gateway's real configuration: the ConfigMap's fleet.yaml passes `fleetgate --check`; the
//    probes and Services point at the container ports that are the ConfigMap's listen ports (and
//    those listen on every interface, not 127.0.0.1); terminationGracePeriodSeconds covers the
//    preStop pause plus server.drain_timeout; every *_env key of the config gets its variable
//    from a Secret (secretKeyRef), never a literal; --config names the mounted ConfigMap key;
//  - the pod's hardening: non-root (the Dockerfile's uid), read-only root filesystem, no
//    privilege escalation, every capability dropped, resources requested and limited;
//  - docs/operations.md creates the Secret with every key the Deployment reads.
// Every semantic check is also run on mutated copies, to prove it can fail.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import YAML from 'yaml';

import { DEPLOY_DIR, DOCKERFILE, stages } from './lib/deploy_util.mjs';
import { REPO_ROOT, makeTempDir, removeDir, runFleetgate } from './lib/gateway.mjs';
import { typeCheck } from './lib/ts_check.mjs';

const K8S_DIR = path.join(DEPLOY_DIR, 'k8s');
const MANIFESTS = ['configmap.yaml', 'deployment.yaml', 'service.yaml'];
const TYPES = {
  'v1/ConfigMap': 'core.ConfigMap',
  'v1/Service': 'core.Service',
  'apps/v1/Deployment': 'apps.Deployment',
};

// Every document of every manifest: [{file, index, doc}].
function loadManifests() {
  return MANIFESTS.flatMap((file) =>
    YAML.parseAllDocuments(fs.readFileSync(path.join(K8S_DIR, file), 'utf8')).map((d, index) => {
      assert.deepEqual(d.errors, [], `${file} parses`);
      return { file, index, doc: d.toJS() };
    }),
  );
}

const fleetgateSeconds = (text) => {
  const m = String(text).match(/^(\d+)(ms|s|m|h)$/);
  assert.ok(m, `a duration: ${text}`);
  return Number(m[1]) * { ms: 1e-3, s: 1, m: 60, h: 3600 }[m[2]];
};

// Every non-empty `*_env` key of a configuration: [{key, variable}].
function envKeys(value, prefix = '') {
  if (Array.isArray(value)) {
    return value.flatMap((v, i) => envKeys(v, `${prefix}[${i}]`));
  }
  if (value && typeof value === 'object') {
    return Object.entries(value).flatMap(([k, v]) =>
      k.endsWith('_env') && typeof v === 'string' && v !== '' ? [{ key: `${prefix}${k}`, variable: v }] : envKeys(v, `${prefix}${k}.`),
    );
  }
  return [];
}

// What is wrong with the manifests, against the gateway's configuration: [string].
function manifestProblems(docs, { dockerUid }) {
  const problems = [];
  const of = (kind) => docs.filter((d) => d.kind === kind);
  const [deployment] = of('Deployment');
  const configMaps = of('ConfigMap');
  if (!deployment) {
    return ['a Deployment'];
  }
  const pod = deployment.spec.template.spec;
  const containers = pod.containers ?? [];
  const c = containers.find((x) => x.name === 'fleetgate');
  if (!c) {
    return ['a container named fleetgate'];
  }

  // --config FILE: a mounted ConfigMap key.
  const args = c.args ?? [];
  const configArg = args[args.indexOf('--config') + 1];
  if (args.indexOf('--config') < 0 || !configArg) {
    return ['the container runs with --config FILE'];
  }
  const mount = (c.volumeMounts ?? []).find((m) => path.posix.dirname(configArg) === m.mountPath);
  const volume = mount && (pod.volumes ?? []).find((v) => v.name === mount.name);
  const cm = volume?.configMap && configMaps.find((m) => m.metadata.name === volume.configMap.name);
  const text = cm?.data?.[path.posix.basename(configArg)];
  if (!text) {
    return [`--config ${configArg} is a key of a ConfigMap mounted at ${path.posix.dirname(configArg)}`];
  }
  if (!mount.readOnly) {
    problems.push('the configuration is mounted read-only');
  }
  const config = YAML.parse(text);

  // Ports: the listen ports, on every interface, are the container's ports; the probes and the
  // Services use them.
  const ports = Object.fromEntries((c.ports ?? []).map((p) => [p.name, p.containerPort]));
  const listen = (addr, what) => {
    const m = String(addr ?? '').match(/^(.*):(\d+)$/);
    if (!m) {
      problems.push(`${what} is set in the ConfigMap (the defaults are 127.0.0.1)`);
      return null;
    }
    if (!['0.0.0.0', '[::]', '::'].includes(m[1])) {
      problems.push(`${what} listens on every interface in a pod, not ${m[1]} (probes and Services come from outside the container)`);
    }
    return Number(m[2]);
  };
  const publicPort = listen(config.server?.listen, 'server.listen');
  const adminPort = listen(config.admin?.listen, 'admin.listen');
  if (ports.http !== publicPort) {
    problems.push(`container port "http" (${ports.http}) is server.listen's port (${publicPort})`);
  }
  if (ports.admin !== adminPort) {
    problems.push(`container port "admin" (${ports.admin}) is admin.listen's port (${adminPort})`);
  }
  const resolve = (port) => (typeof port === 'number' ? port : ports[port]);
  for (const [probe, pathName] of [['readinessProbe', '/readyz'], ['livenessProbe', '/healthz']]) {
    const get = c[probe]?.httpGet;
    if (!get || get.path !== pathName || resolve(get.port) !== adminPort) {
      problems.push(`${probe}: GET ${pathName} on the admin port ${adminPort} (got ${JSON.stringify(get)})`);
    }
  }
  const services = of('Service');
  const served = new Set();
  for (const s of services) {
    for (const p of s.spec.ports ?? []) {
      const target = resolve(p.targetPort ?? p.port);
      if (![publicPort, adminPort].includes(target)) {
        problems.push(`Service ${s.metadata.name} port ${p.name}: targets ${p.targetPort}, not a listen port`);
      }
      served.add(target);
    }
    const sel = s.spec.selector ?? {};
    const labels = deployment.spec.template.metadata.labels ?? {};
    if (Object.keys(sel).length === 0 || !Object.entries(sel).every(([k, v]) => labels[k] === v)) {
      problems.push(`Service ${s.metadata.name} selects the gateway's pods`);
    }
    // Phones register through the admin Service while the pod is not ready (/readyz is 503
    // until a replica is healthy): it must route to not-ready pods, or no phone ever joins.
    const registers = config.registration?.token_env && !(config.models ?? []).some((m) => (m.endpoints ?? []).length > 0);
    if (registers && (s.spec.ports ?? []).some((p) => resolve(p.targetPort) === adminPort) && !s.spec.publishNotReadyAddresses) {
      problems.push(`Service ${s.metadata.name}: publishNotReadyAddresses, or phones cannot register with a pod that is not ready until they do`);
    }
  }
  if (!served.has(publicPort) || !served.has(adminPort)) {
    problems.push('a Service for the public and for the admin listener');
  }

  // Shutdown: the preStop pause, then the drain, within the grace period.
  const drain = fleetgateSeconds(config.server?.drain_timeout ?? '30s');
  const preStop = c.lifecycle?.preStop;
  const pause = preStop?.sleep?.seconds ?? (preStop?.exec?.command?.[0]?.endsWith('sleep') ? Number(preStop.exec.command[1]) : 0);
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  if (grace <= pause + drain) {
    problems.push(`terminationGracePeriodSeconds ${grace} > preStop ${pause}s + server.drain_timeout ${drain}s, or the kubelet kills a draining gateway`);
  }

  // Secrets: every *_env of the config from a secretKeyRef, never a literal.
  const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e]));
  for (const { key, variable } of envKeys(config)) {
    const e = env[variable];
    if (!e?.valueFrom?.secretKeyRef?.name || !e.valueFrom.secretKeyRef.key || e.value !== undefined) {
      problems.push(`${key}: ${variable} comes from a Secret (valueFrom.secretKeyRef), got ${JSON.stringify(e)}`);
    }
  }

  // Hardening.
  const psc = pod.securityContext ?? {};
  const csc = c.securityContext ?? {};
  const runAsNonRoot = csc.runAsNonRoot ?? psc.runAsNonRoot;
  const uid = csc.runAsUser ?? psc.runAsUser;
  if (runAsNonRoot !== true) {
    problems.push('runAsNonRoot: true');
  }
  if (uid !== dockerUid) {
    problems.push(`runAsUser ${uid} is the image's USER ${dockerUid}`);
  }
  if (csc.readOnlyRootFilesystem !== true) {
    problems.push('readOnlyRootFilesystem: true');
  }
  if (csc.allowPrivilegeEscalation !== false) {
    problems.push('allowPrivilegeEscalation: false');
  }
  if (csc.privileged) {
    problems.push('not privileged');
  }
  if (!(csc.capabilities?.drop ?? []).includes('ALL') || (csc.capabilities?.add ?? []).length > 0) {
    problems.push('capabilities: drop ALL, add none');
  }
  if ((csc.seccompProfile ?? psc.seccompProfile)?.type !== 'RuntimeDefault') {
    problems.push('seccompProfile: RuntimeDefault');
  }
  for (const kind of ['requests', 'limits']) {
    for (const r of ['cpu', 'memory']) {
      if (!c.resources?.[kind]?.[r]) {
        problems.push(`resources.${kind}.${r}`);
      }
    }
  }
  if (pod.automountServiceAccountToken !== false) {
    problems.push('automountServiceAccountToken: false (the gateway never talks to the API server)');
  }
  return problems;
}

const dockerUid = () => {
  const user = stages(fs.readFileSync(DOCKERFILE, 'utf8'))
    .at(-1)
    .instructions.filter((i) => i.keyword === 'USER')
    .at(-1)?.args[0];
  return Number(String(user).split(':')[0]);
};

describe('the Kubernetes manifests', () => {
  const manifests = loadManifests();
  const docs = manifests.map((m) => m.doc);
  let dir;
  before(() => {
    dir = makeTempDir('fleetgate-k8s-');
  });
  after(() => removeDir(dir));

  const k8sTypeCheck = (items) =>
    typeCheck(
      ["import type * as core from 'kubernetes-types/core/v1';", "import type * as apps from 'kubernetes-types/apps/v1';"],
      items.map(({ file, index, doc }) => {
        const type = TYPES[`${doc.apiVersion}/${doc.kind}`];
        assert.ok(type, `${file}: a known kind (${doc.apiVersion} ${doc.kind})`);
        return { at: `${file}#${index}`, value: doc, type };
      }),
    );

  test('every document fits Kubernetes\' API types (kubernetes-types)', () => {
    assert.deepEqual(
      docs.map((d) => d.kind).sort(),
      ['ConfigMap', 'Deployment', 'Service', 'Service'],
    );
    const errors = k8sTypeCheck(manifests);
    assert.deepEqual(errors, [], errors.join('\n'));
  });

  test('the type check rejects a misspelt probe field and a port written as a string', () => {
    const bad = structuredClone(manifests);
    const d = bad.find((m) => m.doc.kind === 'Deployment').doc;
    const c = d.spec.template.spec.containers[0];
    c.readinessProbe.httpGet.paht = c.readinessProbe.httpGet.path;
    delete c.readinessProbe.httpGet.path;
    c.ports[0].containerPort = '8080';
    const errors = k8sTypeCheck(bad).join('\n');
    assert.match(errors, /paht/);
    assert.match(errors, /containerPort|string' is not assignable to type 'number/);
  });

  test("the ConfigMap's fleet.yaml passes fleetgate --check", () => {
    const cm = docs.find((d) => d.kind === 'ConfigMap');
    const file = path.join(dir, 'fleet.yaml');
    fs.writeFileSync(file, cm.data['fleet.yaml']);
    const r = runFleetgate(['--config', file, '--check']);
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  });

  test('probes, ports, grace period, secrets and hardening agree with the gateway\'s configuration', () => {
    assert.deepEqual(manifestProblems(docs, { dockerUid: dockerUid() }), []);
  });

  test('each of those checks fails on a mutated copy', () => {
    const mutate = (fn) => {
      const copy = structuredClone(docs);
      const dep = copy.find((d) => d.kind === 'Deployment');
      const c = dep.spec.template.spec.containers[0];
      const cm = copy.find((d) => d.kind === 'ConfigMap');
      const config = YAML.parse(cm.data['fleet.yaml']);
      fn({ copy, dep, c, config, pod: dep.spec.template.spec });
      cm.data['fleet.yaml'] = YAML.stringify(config);
      return manifestProblems(copy, { dockerUid: dockerUid() });
    };
    const cases = [
      [({ config }) => (config.server.drain_timeout = '60s'), /terminationGracePeriodSeconds/],
      [({ pod }) => (pod.terminationGracePeriodSeconds = 30), /terminationGracePeriodSeconds/],
      [({ config }) => (config.admin.listen = '0.0.0.0:9191'), /admin/],
      [({ config }) => (config.server.listen = '127.0.0.1:8080'), /every interface/],
      [({ c }) => (c.readinessProbe.httpGet.port = 'http'), /readinessProbe/],
      [({ c }) => (c.livenessProbe.httpGet.path = '/readyz'), /livenessProbe/],
      [({ c }) => (c.env[0] = { name: c.env[0].name, value: 'sk-inline' }), /secretKeyRef/],
      [({ config }) => (config.upstream = { api_key_env: 'FLEETGATE_REPLICA_KEY' }), /upstream\.api_key_env/],
      [({ c }) => (c.securityContext.readOnlyRootFilesystem = false), /readOnlyRootFilesystem/],
      [({ c }) => (c.securityContext.capabilities = { drop: ['NET_RAW'] }), /capabilities/],
      [({ pod }) => (pod.securityContext.runAsUser = 0), /runAsUser/],
      [({ c }) => delete c.resources.limits, /resources\.limits/],
      [({ c }) => (c.args = ['--config', '/etc/other/fleet.yaml']), /ConfigMap/],
      [({ copy }) => delete copy.find((d) => d.kind === 'Service' && d.metadata.name === 'fleetgate-admin').spec.publishNotReadyAddresses, /publishNotReadyAddresses/],
      [({ copy }) => (copy.find((d) => d.kind === 'Service' && d.metadata.name === 'fleetgate').spec.ports[0].targetPort = 8081), /not a listen port/],
    ];
    for (const [fn, expected] of cases) {
      const problems = mutate(fn);
      assert.ok(problems.some((p) => expected.test(p)), `${fn} -> ${expected} in: ${problems.join(' | ') || '(none)'}`);
    }
  });

  test('kustomization.yaml applies every manifest', () => {
    const k = YAML.parse(fs.readFileSync(path.join(K8S_DIR, 'kustomization.yaml'), 'utf8'));
    const files = fs.readdirSync(K8S_DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    assert.deepEqual([...k.resources].sort(), files.sort());
    assert.deepEqual([...MANIFESTS].sort(), files.sort(), 'this test reads every manifest');
  });

  test('docs/operations.md creates the Secret with every key the Deployment reads', () => {
    const ops = fs.readFileSync(path.join(REPO_ROOT, 'docs', 'operations.md'), 'utf8');
    const refs = docs
      .filter((d) => d.kind === 'Deployment')
      .flatMap((d) => d.spec.template.spec.containers.flatMap((c) => c.env ?? []))
      .map((e) => e.valueFrom?.secretKeyRef)
      .filter(Boolean);
    assert.ok(refs.length >= 3, 'the Deployment reads its keys from a Secret');
    for (const { name, key } of refs) {
      assert.match(ops, new RegExp(`kubectl create secret generic ${name}\\b`), `operations.md creates the Secret ${name}`);
      assert.match(ops, new RegExp(`--from-(literal|file)=${key}=`), `operations.md sets the Secret's key ${key}`);
    }
  });
});
