// Checks a Grafana dashboard (the JSON model, v1: what deploy/grafana/fleetgate.json is) against
// Grafana's own types from npm @grafana/schema, type-checked by the TypeScript compiler (npm
// typescript), in process, with no file written.
//
// @grafana/schema ships TypeScript types, not a JSON schema. The check generates one TypeScript
// module that writes the dashboard as an object literal `satisfies Dashboard` (so TypeScript's
// excess-property and literal-type checks apply: a misspelt key, a string where a number belongs,
// a gridPos without its w, a row without `collapsed`, an unknown graphTooltip value are errors),
// and, because the Dashboard type leaves a panel's `options` and `fieldConfig.defaults.custom` as
// open records, writes each panel's options and custom field config again `satisfies` the panel
// plugin's own Options / FieldConfig types (timeseries, stat, table, heatmap, ...) from the same
// package. Every diagnostic is returned with the JSON path of the value it is about.

import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const TESTS_DIR = path.dirname(HERE); // tests/integration: node_modules is here

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
// Panel types with no options of their own in the schema.
const NO_OPTIONS = new Set(['row']);

export function schemaVersions() {
  return {
    grafanaSchema: require('@grafana/schema/package.json').version,
    typescript: require('typescript').version,
  };
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

// The generated module: one statement per checked value, and a map line -> JSON path so a
// diagnostic names what it is about.
function generate(dashboard) {
  const lines = [
    "import type { Dashboard, Panel, RowPanel } from '@grafana/schema';",
    // A JSON file cannot hold a TypeScript enum member: the schema's string enums (FieldColorModeId,
    // ThresholdsMode, ...) are checked as the union of their values, everything else as it is.
    'type Json<T> = T extends string ? `${T}` : T extends number | boolean | null | undefined ? T : T extends ReadonlyArray<infer U> ? Array<Json<U>> : T extends object ? { [K in keyof T]: Json<T[K]> } : T;',
  ];
  const owners = []; // [firstLine, lastLine, jsonPath]
  const modules = new Map();
  const unknownTypes = [];
  const add = (at, text) => {
    const first = lines.length;
    const body = text.split('\n');
    lines.push(...body);
    owners.push([first, lines.length - 1, at]);
  };
  add('dashboard', `export const dashboard = ${JSON.stringify(dashboard, null, 2)} satisfies Json<Dashboard>;`);
  for (const { panel, at } of panelsWithPaths(dashboard)) {
    const type = panel?.type;
    // Dashboard types panels as Panel | RowPanel, a union TypeScript checks loosely (a key of
    // either member is accepted on both): each panel is checked again as the one it says it is.
    const kind = type === 'row' ? 'RowPanel' : 'Panel';
    add(at, `export const panel_${lines.length} = ${JSON.stringify(panel, null, 2)} satisfies Json<${kind}>;`);
    if (NO_OPTIONS.has(type)) {
      continue;
    }
    const mod = PANEL_MODULES[type];
    if (!mod) {
      unknownTypes.push(`${at}: panel type ${JSON.stringify(type)} has no options type in this check`);
      continue;
    }
    if (!modules.has(type)) {
      const alias = `P_${type}`;
      modules.set(type, alias);
      lines.splice(2, 0, `import type * as ${alias} from '@grafana/schema/dist/esm/raw/composable/${mod}';`);
      for (const o of owners) {
        o[0] += 1;
        o[1] += 1;
      }
    }
    const alias = modules.get(type);
    const id = String(panel.id ?? lines.length).replace(/\W/g, '_');
    add(`${at}.options`, `export const options_${id} = ${JSON.stringify(panel.options ?? {}, null, 2)} satisfies Json<${alias}.Options>;`);
    const custom = panel.fieldConfig?.defaults?.custom;
    if (custom !== undefined) {
      add(`${at}.fieldConfig.defaults.custom`, `export const custom_${id} = ${JSON.stringify(custom, null, 2)} satisfies Json<${alias}.FieldConfig>;`);
    }
  }
  return { text: lines.join('\n'), owners, unknownTypes };
}

// The keys of Grafana's export envelope ("Export for sharing externally"): read by the import
// page (which plugins the dashboard needs, which inputs to ask for), not part of the dashboard
// model, so not in the Dashboard type.
let cachedHost = null;

const EXPORT_ENVELOPE = ['__requires', '__inputs', '__elements'];

// Type-checks `dashboard` (a parsed JSON object). Returns {errors: [string]}; empty when it fits.
export function checkDashboardSchema(dashboard) {
  const ts = require('typescript');
  const model = Object.fromEntries(Object.entries(dashboard).filter(([k]) => !EXPORT_ENVELOPE.includes(k)));
  const { text, owners, unknownTypes } = generate(model);
  const fileName = path.join(TESTS_DIR, '__fleetgate_dashboard_check__.ts');
  const options = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    skipLibCheck: true, // the package's own .d.ts files are Grafana's business; ours is checked
    types: [],
  };
  const host = ts.createCompilerHost(options);
  if (!cachedHost || cachedHost.ts !== ts) {
    cachedHost = { ts, files: new Map() };
  }
  const cache = cachedHost.files; // the library's and TypeScript's own .d.ts files, parsed once
  const source = ts.createSourceFile(fileName, text, options.target, true);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, ...rest) => {
    if (path.resolve(name) === fileName) {
      return source;
    }
    if (!cache.has(name)) {
      cache.set(name, getSourceFile.call(host, name, ...rest));
    }
    return cache.get(name);
  };
  host.fileExists = (name) => path.resolve(name) === fileName || fileExists.call(host, name);
  host.readFile = (name) => (path.resolve(name) === fileName ? text : readFile.call(host, name));
  const program = ts.createProgram([fileName], options, host);
  const diagnostics = [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source), ...program.getGlobalDiagnostics()];
  const errors = diagnostics.map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n    ');
    if (d.file && d.start !== undefined) {
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      const owner = owners.find(([a, b]) => line >= a && line <= b);
      const snippet = text.split('\n')[line].trim().slice(0, 100);
      return `${owner ? owner[2] : 'generated module'} (${snippet}): ${message}`;
    }
    return message;
  });
  return { errors: [...unknownTypes, ...errors] };
}
