// deploy/grafana/fleetgate.json against Grafana's own dashboard model (issue 15, section 4):
// npm @grafana/schema's Dashboard type and each panel plugin's Options/FieldConfig types,
// type-checked by the TypeScript compiler (lib/grafana_schema.mjs). Mutated copies prove the check
// rejects a malformed panel. The PromQL of every panel is checked against a real Prometheus in
// observability_prometheus.test.mjs; here, that the "by API" row sums the gateway's real counters
// by the api label.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, describe, test } from 'node:test';

import { checkDashboardSchemas, schemaVersions } from './lib/grafana_schema.mjs';
import { REPO_ROOT } from './lib/gateway.mjs';
import { allPanels, loadDashboard, metricNames } from './lib/obs_util.mjs';

const clone = (x) => structuredClone(x);
// The first top-level panel of a type, and its JSON path (the objects themselves, not copies).
function firstOfType(d, type) {
  const i = d.panels.findIndex((p) => p.type === type);
  assert.ok(i >= 0, `the dashboard has a ${type} panel`);
  return { panel: d.panels[i], at: `panels[${i}]` };
}

// The mutated copies, each with the path and a word the rejection must name. All are checked in
// one compiler run with the dashboard itself (before()), and each test reads its results.
function mutations(dashboard) {
  const cases = {};
  const add = (name, fn) => {
    const d = clone(dashboard);
    const [at, word] = fn(d);
    cases[name] = { dashboard: d, at, word };
  };
  add('misspelt key', (d) => {
    const { panel, at } = firstOfType(d, 'timeseries');
    panel.targtes = panel.targets;
    delete panel.targets;
    return [at, 'targtes'];
  });
  add('string width', (d) => {
    const { panel, at } = firstOfType(d, 'stat');
    panel.gridPos.w = 'wide';
    return [at, 'number'];
  });
  add('no height', (d) => {
    const { panel, at } = firstOfType(d, 'stat');
    delete panel.gridPos.h;
    return [at, "'h'"];
  });
  add('row without collapsed', (d) => {
    const { panel, at } = firstOfType(d, 'row');
    delete panel.collapsed;
    return [at, 'collapsed'];
  });
  add('panel without type', (d) => {
    const { panel, at } = firstOfType(d, 'stat');
    delete panel.type;
    return [at, "'type'"];
  });
  add('bad legend mode', (d) => {
    const { panel, at } = firstOfType(d, 'timeseries');
    panel.options.legend.displayMode = 'sideways';
    return [`${at}.options`, 'sideways'];
  });
  add('stat reducers as a string', (d) => {
    const { panel, at } = firstOfType(d, 'stat');
    panel.options.reduceOptions.calcs = 'lastNotNull';
    return [`${at}.options`, 'string'];
  });
  add("Grafana 9's heatmap tooltip.show", (d) => {
    const { panel, at } = firstOfType(d, 'heatmap');
    panel.options.tooltip.show = true; // gone from the model
    return [`${at}.options`, 'show'];
  });
  add('unknown table alignment', (d) => {
    const { panel, at } = firstOfType(d, 'table');
    panel.fieldConfig.defaults.custom.align = 'middle';
    return [`${at}.fieldConfig.defaults.custom`, 'middle'];
  });
  add('bad option inside a collapsed row', (d) => {
    const i = d.panels.findIndex((q) => q.type === 'row' && q.collapsed && q.panels.length > 0);
    assert.ok(i >= 0, 'the dashboard has a collapsed row with panels');
    d.panels[i].panels[0].options.tooltip.mode = 'everything';
    return [`panels[${i}].panels[0].options`, 'everything'];
  });
  add('unknown panel type', (d) => {
    const { panel, at } = firstOfType(d, 'stat');
    panel.type = 'statt';
    return [at, '"statt"'];
  });
  return cases;
}

describe("the Grafana dashboard against Grafana's schema", () => {
  const dashboard = loadDashboard();
  const cases = mutations(dashboard);
  let own;
  const results = {};
  before(() => {
    const names = Object.keys(cases);
    const checked = checkDashboardSchemas([dashboard, ...names.map((n) => cases[n].dashboard)]);
    own = checked[0].errors;
    names.forEach((n, i) => {
      results[n] = checked[i + 1].errors;
    });
  });

  // The case was rejected, with an error that names its path and word.
  const assertRejected = (name) => {
    const { at, word } = cases[name];
    const errors = results[name];
    assert.ok(errors.length > 0, `the mutated dashboard (${name}) is rejected`);
    assert.ok(
      errors.some((e) => e.startsWith(at) && e.includes(word)),
      `an error names ${at} and ${word}:\n  ${errors.join('\n  ')}`,
    );
  };

  test("fleetgate.json fits @grafana/schema (Dashboard, and each panel type's Options and FieldConfig)", () => {
    const v = schemaVersions();
    console.log(`# grafana schema: @grafana/schema ${v.grafanaSchema}, typescript ${v.typescript}, ${allPanels(dashboard).length} panels`);
    assert.deepEqual(own, [], `the dashboard does not fit Grafana's types:\n  ${own.join('\n  ')}`);
  });

  test('a panel with a misspelt key is rejected', () => assertRejected('misspelt key'));

  test('a panel whose gridPos has a string width, or no height, is rejected', () => {
    assertRejected('string width');
    assertRejected('no height');
  });

  test('a row without collapsed, or a panel without a type, is rejected', () => {
    assertRejected('row without collapsed');
    assertRejected('panel without type');
  });

  test("a panel's plugin options are checked too: a bad legend mode, stat reducers, heatmap tooltip, table alignment", () => {
    assertRejected('bad legend mode');
    assertRejected('stat reducers as a string');
    assertRejected("Grafana 9's heatmap tooltip.show");
    assertRejected('unknown table alignment');
  });

  test('a panel inside a collapsed row is checked as well', () => assertRejected('bad option inside a collapsed row'));

  test('an unknown panel type is reported, not passed unchecked', () => assertRejected('unknown panel type'));

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
