// deploy/grafana/fleetgate.json against Grafana's own dashboard model (issue 15, section 4):
// npm @grafana/schema's Dashboard type and each panel plugin's Options/FieldConfig types,
// type-checked by the TypeScript compiler (lib/grafana_schema.mjs). Mutated copies prove the check
// rejects a malformed panel. The PromQL of every panel is checked against a real Prometheus in
// observability_prometheus.test.mjs; here, that the "by API" row sums the gateway's real counters
// by the api label.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';

import { checkDashboardSchema, schemaVersions } from './lib/grafana_schema.mjs';
import { REPO_ROOT } from './lib/gateway.mjs';
import { allPanels, loadDashboard, metricNames } from './lib/obs_util.mjs';

const clone = (x) => structuredClone(x);
// The first top-level panel of a type, and its JSON path (the objects themselves, not copies).
function firstOfType(d, type) {
  const i = d.panels.findIndex((p) => p.type === type);
  assert.ok(i >= 0, `the dashboard has a ${type} panel`);
  return { panel: d.panels[i], at: `panels[${i}]` };
}

// Asserts the check rejects `mutated`, with a message about `at` mentioning `word`.
function assertRejected(mutated, at, word) {
  const { errors } = checkDashboardSchema(mutated);
  assert.ok(errors.length > 0, `the mutated dashboard (${at}) is rejected`);
  assert.ok(
    errors.some((e) => e.startsWith(at) && e.includes(word)),
    `an error names ${at} and ${word}:\n  ${errors.join('\n  ')}`,
  );
}

describe("the Grafana dashboard against Grafana's schema", () => {
  const dashboard = loadDashboard();

  test('fleetgate.json fits @grafana/schema (Dashboard, and each panel type\'s Options and FieldConfig)', () => {
    const { errors } = checkDashboardSchema(dashboard);
    const v = schemaVersions();
    console.log(`# grafana schema: @grafana/schema ${v.grafanaSchema}, typescript ${v.typescript}, ${allPanels(dashboard).length} panels`);
    assert.deepEqual(errors, [], `the dashboard does not fit Grafana's types:\n  ${errors.join('\n  ')}`);
  });

  test('a panel with a misspelt key is rejected', () => {
    const d = clone(dashboard);
    const { panel, at } = firstOfType(d, 'timeseries');
    panel.targtes = panel.targets;
    delete panel.targets;
    assertRejected(d, at, 'targtes');
  });

  test('a panel whose gridPos has a string width, or no height, is rejected', () => {
    const d = clone(dashboard);
    const a = firstOfType(d, 'stat');
    a.panel.gridPos.w = 'wide';
    assertRejected(d, a.at, 'number');
    const e = clone(dashboard);
    const b = firstOfType(e, 'stat');
    delete b.panel.gridPos.h;
    assertRejected(e, b.at, "'h'");
  });

  test('a row without collapsed, or a panel without a type, is rejected', () => {
    const d = clone(dashboard);
    const row = firstOfType(d, 'row');
    delete row.panel.collapsed;
    assertRejected(d, row.at, 'collapsed');
    const e = clone(dashboard);
    const stat = firstOfType(e, 'stat');
    delete stat.panel.type;
    assertRejected(e, stat.at, "'type'");
  });

  test("a panel's plugin options are checked too: a bad legend mode, a bad stat reducer list, an unknown heatmap option", () => {
    const d = clone(dashboard);
    const ts = firstOfType(d, 'timeseries');
    ts.panel.options.legend.displayMode = 'sideways';
    assertRejected(d, `${ts.at}.options`, 'sideways');

    const e = clone(dashboard);
    const stat = firstOfType(e, 'stat');
    stat.panel.options.reduceOptions.calcs = 'lastNotNull';
    assertRejected(e, `${stat.at}.options`, 'string');

    const f = clone(dashboard);
    const heat = firstOfType(f, 'heatmap');
    heat.panel.options.tooltip.show = true; // Grafana 9's option, gone from the model
    assertRejected(f, `${heat.at}.options`, 'show');

    const g = clone(dashboard);
    const table = firstOfType(g, 'table');
    table.panel.fieldConfig.defaults.custom.align = 'middle';
    assertRejected(g, `${table.at}.fieldConfig.defaults.custom`, 'middle');
  });

  test('a panel inside a collapsed row is checked as well', () => {
    const d = clone(dashboard);
    const i = d.panels.findIndex((q) => q.type === 'row' && q.collapsed && q.panels.length > 0);
    assert.ok(i >= 0, 'the dashboard has a collapsed row with panels');
    d.panels[i].panels[0].options.tooltip.mode = 'everything';
    assertRejected(d, `panels[${i}].panels[0].options`, 'everything');
  });

  test('an unknown panel type is reported, not passed unchecked', () => {
    const d = clone(dashboard);
    firstOfType(d, 'stat').panel.type = 'statt';
    const { errors } = checkDashboardSchema(d);
    assert.ok(errors.some((e) => e.includes('"statt"')), errors.join('\n'));
  });

  test('__requires lists every panel type the dashboard uses', () => {
    const required = new Set(dashboard.__requires.filter((r) => r.type === 'panel').map((r) => r.id));
    const used = new Set(allPanels(dashboard).map((p) => p.type).filter((t) => t !== 'row'));
    assert.deepEqual([...used].filter((t) => !required.has(t)), []);
  });

  test('panels do not overlap in the grid (24 columns)', () => {
    // Only the panels shown when the dashboard opens: a collapsed row's panels are laid out when
    // it is opened.
    const shown = dashboard.panels;
    const problems = [];
    for (const [i, a] of shown.entries()) {
      const g = a.gridPos;
      if (g.x + g.w > 24) {
        problems.push(`${a.title}: x + w = ${g.x + g.w} > 24`);
      }
      for (const b of shown.slice(i + 1)) {
        const h = b.gridPos;
        if (g.x < h.x + h.w && h.x < g.x + g.w && g.y < h.y + h.h && h.y < g.y + g.h) {
          problems.push(`${a.title} overlaps ${b.title}`);
        }
      }
    }
    assert.deepEqual(problems, []);
  });
});

describe('the "requests and tokens by API" row', () => {
  const dashboard = loadDashboard();
  const metricsSource = fs.readFileSync(path.join(REPO_ROOT, 'orchestrator', 'metrics', 'metrics.cpp'), 'utf8');

  test('sums the gateway\'s request and token counters by api', () => {
    const rowIndex = dashboard.panels.findIndex((p) => p.type === 'row' && /by API/i.test(p.title));
    assert.ok(rowIndex >= 0, 'the dashboard has a "by API" row');
    const next = dashboard.panels.findIndex((p, i) => i > rowIndex && p.type === 'row');
    const panels = dashboard.panels.slice(rowIndex + 1, next < 0 ? undefined : next);
    const exprs = panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    const names = new Set(exprs.flatMap((e) => metricNames(e)));
    for (const metric of ['fleetgate_requests_total', 'fleetgate_tokens_total']) {
      assert.ok(metricsSource.includes(`.Name("${metric}")`), `${metric} is a metric of orchestrator/metrics`);
      assert.ok(names.has(metric), `the row uses ${metric}: ${exprs.join(' | ')}`);
    }
    for (const e of exprs) {
      assert.match(e, /sum by \((?:[a-z_]+, )*api(?:, [a-z_]+)*\)/, `grouped by api: ${e}`);
    }
    for (const p of panels) {
      assert.ok(p.targets.every((t) => t.legendFormat.includes('{{api}}')), `${p.title}: the legend names the api`);
    }
  });
});
