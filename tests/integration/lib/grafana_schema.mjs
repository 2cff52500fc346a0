// Checks a Grafana dashboard (the JSON model, v1: what deploy/grafana/fleetgate.json is) against
// Grafana's own types from npm @grafana/schema, type-checked by the TypeScript compiler
// (lib/ts_check.mjs). @grafana/schema ships TypeScript types, not a JSON schema.
//
// Checked: the whole dashboard `satisfies Dashboard`; each panel again as the Panel or RowPanel it
// says it is (Dashboard types panels as Panel | RowPanel, a union TypeScript checks loosely: a key
// of either member is accepted on both); and, because Panel leaves `options` and
// `fieldConfig.defaults.custom` as open records, each panel's options and custom field config
// against its plugin's own Options / FieldConfig types (timeseries, stat, table, heatmap, ...).
// A panel type this check has no types for is an error, not a pass.

import { createRequire } from 'node:module';

import { typeCheck, typescriptVersion } from './ts_check.mjs';

const require = createRequire(import.meta.url);

// Panel type -> the module of @grafana/schema with its Options and FieldConfig types.
const PANEL_MODULES = {
  timeseries: 'timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen',
  stat: 'stat/panelcfg/x/StatPanelCfg_types.gen',
  table: 'table/panelcfg/x/TablePanelCfg_types.gen',
  heatmap: 'heatmap/panelcfg/x/HeatmapPanelCfg_types.gen',
  gauge: 'gauge/panelcfg/x/GaugePanelCfg_types.gen',
  bargauge: 'bargauge/panelcfg/x/BarGaugePanelCfg_types.gen',
  barchart: 'barchart/panelcfg/x/BarChartPanelCfg_types.gen',
  piechart: 'piechart/panelcfg/x/PieChartPanelCfg_types.gen',
  text: 'text/panelcfg/x/TextPanelCfg_types.gen',
  statetimeline: 'statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen',
  histogram: 'histogram/panelcfg/x/HistogramPanelCfg_types.gen',
};

// The keys of Grafana's export envelope ("Export for sharing externally"): read by the import
// page (which plugins the dashboard needs, which inputs to ask for), not part of the dashboard
// model, so not in the Dashboard type.
const EXPORT_ENVELOPE = ['__requires', '__inputs', '__elements'];

export function schemaVersions() {
  return { grafanaSchema: require('@grafana/schema/package.json').version, typescript: typescriptVersion() };
}

// Every panel with its JSON path: top-level panels and the panels inside collapsed rows.
function panelsWithPaths(dashboard) {
  const out = [];
  (dashboard.panels ?? []).forEach((p, i) => {
    out.push({ panel: p, at: `panels[${i}]` });
    (p?.panels ?? []).forEach((q, j) => out.push({ panel: q, at: `panels[${i}].panels[${j}]` }));
  });
  return out;
}

// The entries (values and their types) and the non-type errors for one dashboard.
function dashboardEntries(dashboard, imports, aliases) {
  const model = Object.fromEntries(Object.entries(dashboard).filter(([k]) => !EXPORT_ENVELOPE.includes(k)));
  const entries = [{ at: 'dashboard', value: model, type: 'Dashboard' }];
  const errors = [];
  for (const { panel, at } of panelsWithPaths(model)) {
    const type = panel?.type;
    entries.push({ at, value: panel, type: type === 'row' ? 'RowPanel' : 'Panel' });
    if (type === 'row') {
      continue;
    }
    const mod = PANEL_MODULES[type];
    if (!mod) {
      errors.push(`${at}: panel type ${JSON.stringify(type)} has no options type in this check`);
      continue;
    }
    if (!aliases.has(type)) {
      aliases.set(type, `P_${type}`);
      imports.push(`import type * as P_${type} from '@grafana/schema/dist/esm/raw/composable/${mod}';`);
    }
    entries.push({ at: `${at}.options`, value: panel.options ?? {}, type: `${aliases.get(type)}.Options` });
    const custom = panel.fieldConfig?.defaults?.custom;
    if (custom !== undefined) {
      entries.push({ at: `${at}.fieldConfig.defaults.custom`, value: custom, type: `${aliases.get(type)}.FieldConfig` });
    }
  }
  return { entries, errors };
}

// Type-checks several dashboards (parsed JSON objects) in one compiler run (a run costs a second
// or two, mostly the same for one dashboard or ten). Returns one {errors: [string]} per dashboard,
// in order; empty errors when it fits.
export function checkDashboardSchemas(dashboards) {
  const imports = ["import type { Dashboard, Panel, RowPanel } from '@grafana/schema';"];
  const aliases = new Map();
  const all = [];
  const results = dashboards.map((d, k) => {
    const { entries, errors } = dashboardEntries(d, imports, aliases);
    all.push(...entries.map((e) => ({ ...e, at: `${k}\u0000${e.at}` })));
    return { errors };
  });
  for (const message of typeCheck(imports, all)) {
    const m = message.match(/^(\d+)\u0000/);
    if (m) {
      results[Number(m[1])].errors.push(message.slice(m[0].length));
    } else {
      results.forEach((r) => r.errors.push(message)); // not about one value: every dashboard fails
    }
  }
  return results;
}

export function checkDashboardSchema(dashboard) {
  return checkDashboardSchemas([dashboard])[0];
}
