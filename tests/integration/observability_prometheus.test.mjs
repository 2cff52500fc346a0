// Observability, proven against a real Prometheus (issue 6):
//  - promtool accepts deploy/prometheus/{prometheus.yml, alerts.yml} and the alert unit tests;
//  - promtool check metrics accepts the gateway's /metrics (and the agent's, when it serves one);
//  - a real Prometheus (Debian package, 127.0.0.1, temp TSDB, 1 s scrapes) scrapes a gateway that
//    runs a local simulated fleet under traffic (successes, streams, queue rejections, retries on a
//    failing phone); then EVERY PromQL expression of deploy/grafana/fleetgate.json must parse and
//    return at least one series, and every rule of alerts.yml must parse and evaluate cleanly.
//
// The agent's /metrics: when the simulated phones answer GET /metrics with 200, they are scraped
// too (file_sd, as in deploy/prometheus/prometheus.yml) and the dashboard's phone panels
// (fleetgate_agent_*) must return series; otherwise those panels are reported as skipped.
//
// Skipped (with the reason) only when /usr/bin/prometheus or /usr/bin/promtool is missing;
// ./fleet test installs the Debian package, so in CI it runs.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startFakeReplica } from './lib/fake_replica.mjs';
import { eventually, makeTempDir, openStream, postJson, removeDir, request, sleep, startGateway } from './lib/gateway.mjs';
import {
  PROMETHEUS_DIR,
  allPanels,
  dashboardExpressions,
  declaredAlerts,
  fillGrafanaVariables,
  loadDashboard,
  loadedRules,
  metricNames,
  prometheusMissing,
  promtool,
  startPrometheus,
} from './lib/obs_util.mjs';

const MODEL = 'm';
// Grafana's variables as the test fills them in. $__rate_interval is at least 4 scrape intervals
// in Grafana; with 1 s scrapes, 10 s.
const GRAFANA_VARS = {
  model: MODEL,
  datasource: 'prometheus',
  __rate_interval: '10s',
  __interval: '2s',
  __range: '1m',
  __range_s: '60',
};
const SCRAPE_INTERVAL = '1s';

const missing = prometheusMissing();
if (missing) {
  console.log(`# observability_prometheus: SKIPPED: ${missing}`);
}

const chatBody = (extra = {}) => ({ model: MODEL, messages: [{ role: 'user', content: 'is this card payment risky?' }], ...extra });

describe('observability against a real Prometheus', { skip: missing ?? false }, () => {
  let fake; // a phone that answers 500 to every request (probes pass): retries, upstream errors, ejections
  let gw;
  let prom;
  let workDir;
  let sdFile;
  let agents = []; // [{address, replica}]
  let agentMetricsServed = false;
  let agentMetricsNote = '';
  const traffic = { statuses: {}, streams: 0 };
  let background = null;
  let stopBackground = false;
  const started = Date.now();

  const countStatus = (s) => {
    traffic.statuses[s] = (traffic.statuses[s] ?? 0) + 1;
  };

  async function chat(extra = {}, options = {}) {
    const res = await postJson(gw.publicUrl, '/v1/chat/completions', chatBody(extra), { timeoutMs: 15000, ...options });
    countStatus(res.status);
    return res;
  }

  async function stream(extra = {}) {
    const s = await openStream(`${gw.publicUrl}/v1/chat/completions`, { body: chatBody({ stream: true, ...extra }) });
    countStatus(s.status);
    await s.done.catch(() => {});
    ++traffic.streams;
  }

  before(async () => {
    workDir = makeTempDir('fleetgate-obs-');
    sdFile = path.join(workDir, 'agents.json');
    fake = await startFakeReplica({ name: 'failing', mode: { type: 'status', status: 500 } });
    gw = await startGateway({
      admin: { listen: '127.0.0.1:0', prometheus_sd_file: sdFile },
      models: [
        {
          name: MODEL,
          replicas: 4, // one more than it has: the fleet is degraded, so the degraded panels and alert have data
          local: { count: 2, profile: 'fast-test', time_scale: 1 },
          endpoints: [fake.url],
        },
      ],
      health: { interval: '500ms', timeout: '400ms', unhealthy_after: 3, healthy_after: 2, eject_after: 2 },
      routing: { queue_max: 2, queue_timeout: '300ms', retries: 2 },
    });

    // The simulated phones: address and replica id from the gateway's log lines.
    await gw.waitForLog((l) => l.msg === 'listening' && l.listener === 'admin');
    const agentLines = gw.logs.filter((l) => l.msg === 'local agent started');
    const added = gw.logs.filter((l) => l.msg === 'replica added');
    agents = agentLines.map((l) => ({
      address: l.address,
      replica: added.find((a) => a.url === `http://${l.address}`)?.replica,
    }));
    assert.equal(agents.length, 2, `two local agents started: ${JSON.stringify(agentLines)}`);
    await eventually(async () => (await gw.metric('fleetgate_replicas', { model: MODEL, state: 'healthy' })) >= 3, {
      timeoutMs: 10000,
      what: 'three healthy replicas',
    });

    // Does the agent serve /metrics yet?
    const probe = await request(`http://${agents[0].address}/metrics`).catch((e) => ({ status: 0, text: String(e) }));
    agentMetricsServed = probe.status === 200;
    agentMetricsNote = agentMetricsServed ? 'the agent serves /metrics: checked' : `the agent does not serve /metrics yet (GET /metrics: ${probe.status}): agent checks skipped`;

    // The agents' file_sd list: the gateway's own (admin.prometheus_sd_file) when it writes one,
    // otherwise written here in the same format.
    if (!fs.existsSync(sdFile)) {
      fs.writeFileSync(path.join(workDir, 'agents.test.json'), JSON.stringify(agents.map((a) => ({
        targets: [a.address],
        labels: { model: MODEL, replica: a.replica },
      }))));
    }
    const sdPath = fs.existsSync(sdFile) ? sdFile : path.join(workDir, 'agents.test.json');

    const config = [
      'global:',
      `  scrape_interval: ${SCRAPE_INTERVAL}`,
      `  scrape_timeout: ${SCRAPE_INTERVAL}`,
      `  evaluation_interval: ${SCRAPE_INTERVAL}`,
      'rule_files:',
      '  - alerts.yml',
      'scrape_configs:',
      '  - job_name: fleetgate',
      '    static_configs:',
      `      - targets: ["${new URL(gw.adminUrl).host}"]`,
      '  - job_name: fleetgate-agent',
      '    file_sd_configs:',
      `      - files: [${JSON.stringify(sdPath)}]`,
      '        refresh_interval: 1s',
      '',
    ].join('\n');
    prom = await startPrometheus(config, { files: { 'alerts.yml': fs.readFileSync(path.join(PROMETHEUS_DIR, 'alerts.yml'), 'utf8') } });

    // Traffic while Prometheus scrapes.
    // 1. Successes, plain and streamed (the failing phone's 500s are retried on a simulated one).
    for (let i = 0; i < 4; ++i) {
      await Promise.all([chat(), chat({ max_tokens: 4 }), stream()]);
    }
    // 2. A burst larger than slots + queue_max: queue rejections (full: 429; timeout: 503).
    await Promise.all(Array.from({ length: 12 }, () => chat({ max_tokens: 80 })));
    // 3. A steady trickle until the queries are done, so rates and quantiles have data.
    background = (async () => {
      while (!stopBackground) {
        await Promise.all([chat(), stream({ max_tokens: 8 })]).catch(() => {});
        await sleep(100);
      }
    })();
    await prom.waitForScrapes('fleetgate', 8);
    if (agentMetricsServed) {
      await prom.waitForScrapes('fleetgate-agent', 8);
    }
  });

  after(async () => {
    stopBackground = true;
    await background?.catch(() => {});
    await prom?.stop();
    await gw?.stop();
    await fake?.close();
    removeDir(workDir);
  });

  test('traffic produced successes, queue rejections and retries', async (t) => {
    t.diagnostic(`statuses seen by clients: ${JSON.stringify(traffic.statuses)}, streams: ${traffic.streams}`);
    t.diagnostic(agentMetricsNote);
    assert.ok((traffic.statuses[200] ?? 0) > 10, 'successful requests');
    assert.ok((traffic.statuses[429] ?? 0) + (traffic.statuses[503] ?? 0) > 0, 'at least one queue rejection (429 full or 503 timeout)');
    assert.ok(fake.requests.some((r) => r.method === 'POST'), 'the failing phone got requests (and failed them: retries)');
  });

  test('promtool accepts prometheus.yml, alerts.yml and the alert unit tests', () => {
    const rules = promtool(['check', 'rules', path.join(PROMETHEUS_DIR, 'alerts.yml')]);
    assert.equal(rules.status, 0, `promtool check rules:\n${rules.output}`);
    const unit = promtool(['test', 'rules', 'alerts_test.yml'], { cwd: PROMETHEUS_DIR });
    assert.equal(unit.status, 0, `promtool test rules:\n${unit.output}`);
    // A copy: the file_sd path of the real config does not exist here (a warning, not an error).
    const dir = makeTempDir('fleetgate-promcfg-');
    try {
      for (const f of ['prometheus.yml', 'alerts.yml']) {
        fs.copyFileSync(path.join(PROMETHEUS_DIR, f), path.join(dir, f));
      }
      const config = promtool(['check', 'config', path.join(dir, 'prometheus.yml')]);
      assert.equal(config.status, 0, `promtool check config:\n${config.output}`);
      assert.match(config.output, /1 rule files found/);
    } finally {
      removeDir(dir);
    }
  });

  test("promtool check metrics accepts the gateway's /metrics", async () => {
    const text = await gw.metrics();
    const r = promtool(['check', 'metrics'], { input: text });
    assert.equal(r.status, 0, `promtool check metrics (gateway):\n${r.output}`);
    for (const line of text.split('\n').filter((l) => l.startsWith('# TYPE '))) {
      const name = line.split(' ')[2];
      assert.match(name, /^fleetgate_/, `every metric has the fleetgate_ prefix: ${name}`);
      assert.ok(text.includes(`# HELP ${name} `), `${name} has a HELP text`);
    }
  });

  test("promtool check metrics accepts the agent's /metrics (when it serves one)", async (t) => {
    if (!agentMetricsServed) {
      t.skip(agentMetricsNote);
      return;
    }
    for (const a of agents) {
      const res = await request(`http://${a.address}/metrics`);
      assert.equal(res.status, 200);
      const r = promtool(['check', 'metrics'], { input: res.text });
      assert.equal(r.status, 0, `promtool check metrics (agent ${a.replica}):\n${r.output}`);
      for (const line of res.text.split('\n').filter((l) => l.startsWith('# TYPE '))) {
        assert.match(line.split(' ')[2], /^fleetgate_agent_/, `agent metrics have the fleetgate_agent_ prefix: ${line}`);
      }
    }
  });

  test('the gateway writes admin.prometheus_sd_file as file_sd JSON (when implemented)', async (t) => {
    if (!fs.existsSync(sdFile)) {
      t.skip(`the gateway wrote no ${path.basename(sdFile)} (admin.prometheus_sd_file not implemented yet)`);
      return;
    }
    let list;
    await eventually(() => {
      try {
        list = JSON.parse(fs.readFileSync(sdFile, 'utf8'));
      } catch {
        return false;
      }
      return Array.isArray(list) && agents.every((a) => list.some((e) => e?.labels?.replica === a.replica));
    }, { timeoutMs: 5000, what: `an entry per local agent in ${sdFile}` }).catch(() => {});
    assert.ok(Array.isArray(list), `a JSON array: ${fs.readFileSync(sdFile, 'utf8')}`);
    const byReplica = Object.fromEntries(list.map((e) => [e.labels?.replica, e]));
    for (const a of agents) {
      const e = byReplica[a.replica];
      assert.ok(e, `an entry for ${a.replica}: ${JSON.stringify(list)}`);
      assert.deepEqual(e.targets, [a.address]);
      assert.equal(e.labels.model, MODEL);
    }
    for (const e of list) {
      assert.ok(Array.isArray(e.targets) && e.targets.length > 0 && e.targets.every((x) => /^[^/]+:\d+$/.test(x)), `targets are host:port: ${JSON.stringify(e)}`);
      assert.equal(typeof e.labels?.model, 'string', `a model label: ${JSON.stringify(e)}`);
      assert.match(e.labels?.replica ?? '', /^r\d+$/, `a replica id label: ${JSON.stringify(e)}`);
    }
    t.diagnostic(`${path.basename(sdFile)}: ${JSON.stringify(list)}`);
  });

  test('the dashboard is importable: datasource and model variables, unique panel ids', () => {
    const d = loadDashboard();
    const vars = Object.fromEntries(d.templating.list.map((v) => [v.name, v]));
    assert.equal(vars.datasource?.type, 'datasource');
    assert.equal(vars.datasource?.query, 'prometheus');
    assert.equal(vars.model?.type, 'query');
    // `query`, not `definition`: Grafana's schema has no `definition` (deploy_grafana.test.mjs).
    assert.match(vars.model.query, /^label_values\(fleetgate_replicas_desired, *model\)$/);
    const panels = allPanels(d);
    const ids = panels.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, 'unique panel ids');
    const rows = panels.filter((p) => p.type === 'row').map((p) => p.title.toLowerCase());
    for (const want of ['fleet', 'throughput', 'latency', 'queue', 'errors', 'per replica', 'process']) {
      assert.ok(rows.some((r) => r.startsWith(want)), `a "${want}" row in ${JSON.stringify(rows)}`);
    }
    for (const p of panels.filter((x) => x.type !== 'row')) {
      assert.equal(p.datasource?.uid, '${datasource}', `panel "${p.title}" uses the datasource variable`);
      assert.ok(p.description, `panel "${p.title}" says what it answers`);
      for (const t of p.targets ?? []) {
        assert.equal(t.datasource?.uid, '${datasource}', `target ${t.refId} of "${p.title}" uses the datasource variable`);
      }
    }
  });

  test("the dashboard's model variable lists the model", async () => {
    const body = await prom.api('label/model/values', { 'match[]': 'fleetgate_replicas_desired' });
    assert.equal(body.status, 'success');
    assert.ok(body.data.includes(MODEL), `model values: ${JSON.stringify(body.data)}`);
  });

  test('every PromQL expression of the dashboard parses and returns series', async (t) => {
    const exprs = dashboardExpressions(loadDashboard());
    assert.ok(exprs.length > 30, `the dashboard has its expressions (${exprs.length})`);
    const parseErrors = [];
    const empty = [];
    const skipped = [];
    const nan = [];
    for (const e of exprs) {
      const filled = fillGrafanaVariables(e.expr, GRAFANA_VARS);
      const r = await prom.query(filled);
      if (!r.ok) {
        parseErrors.push(`${e.where}: ${r.error}\n      ${filled}`);
        continue;
      }
      const isAgent = metricNames(filled).some((n) => n.startsWith('fleetgate_agent_'));
      if (r.result.length === 0) {
        if (isAgent && !agentMetricsServed) {
          skipped.push(`${e.where}: ${filled}`);
        } else {
          empty.push(`${e.where} [${metricNames(filled).join(', ')}]: ${filled}`);
        }
      } else if (r.resultType === 'vector' && r.result.every((s) => s.value[1] === 'NaN')) {
        nan.push(`${e.where}`);
      }
    }
    t.diagnostic(`${exprs.length} expressions; ${parseErrors.length} do not parse, ${empty.length} return no series, ${skipped.length} skipped (agent), ${nan.length} only NaN`);
    for (const s of skipped) {
      t.diagnostic(`SKIPPED (${agentMetricsNote}): ${s}`);
    }
    for (const s of nan) {
      t.diagnostic(`only NaN (no observations in the window): ${s}`);
    }
    for (const s of empty) {
      t.diagnostic(`NO SERIES: ${s}`);
    }
    const problems = [
      ...parseErrors.map((s) => `DOES NOT PARSE: ${s}`),
      ...empty.map((s) => `NO SERIES (a panel that shows nothing): ${s}`),
    ];
    assert.ok(problems.length === 0, `${problems.length} of ${exprs.length} dashboard expressions fail:\n  ${problems.join('\n  ')}`);
  });

  test('every alert rule parses and evaluates without error', async (t) => {
    const declared = declaredAlerts(fs.readFileSync(path.join(PROMETHEUS_DIR, 'alerts.yml'), 'utf8'));
    assert.ok(declared.length >= 4, `alerts declared: ${declared}`);
    for (const want of ['FleetDegraded', 'QueueWaitHigh', 'HighErrorRatio', 'NoHealthyReplica']) {
      assert.ok(declared.includes(want), `alert ${want} in alerts.yml`);
    }
    let rules;
    // Every rule evaluated at least once (health leaves "unknown").
    await eventually(async () => {
      rules = await loadedRules(prom);
      return rules.length === declared.length && rules.every((r) => r.health !== 'unknown');
    }, { timeoutMs: 10000, everyMs: 200, what: 'every rule evaluated' });
    for (const r of rules) {
      assert.equal(r.health, 'ok', `rule ${r.name} evaluates cleanly: ${r.lastError}`);
      const q = await prom.query(r.query);
      assert.ok(q.ok, `rule ${r.name} parses: ${q.error}\n  ${r.query}`);
      t.diagnostic(`alert ${r.name}: ${q.result.length} series now (state ${r.state})`);
    }
    const degraded = rules.find((r) => r.name === 'FleetDegraded');
    assert.notEqual(degraded.state, 'inactive', 'FleetDegraded is pending: 3 replicas of 4 desired (it fires after 5 minutes)');
  });

  test('runtime', (t) => {
    t.diagnostic(`FIGURE observability test runtime until here: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });
});
