// Type-checks JSON values against TypeScript types from npm packages (@grafana/schema,
// kubernetes-types), with the TypeScript compiler (npm typescript), in process, no file written.
//
// Each value is written as an object literal `satisfies Json<Type>` in one generated module, so
// TypeScript's excess-property and literal checks apply: a misspelt key, a string where a number
// belongs, a missing required key, a value outside a string union are errors. Json<T> maps the
// packages' string enums to the union of their values (a JSON or YAML file cannot hold an enum
// member). Every diagnostic is returned prefixed with the `at` of the value it is about.

import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const TESTS_DIR = path.dirname(path.dirname(fileURLToPath(import.meta.url))); // node_modules is here

const JSON_TYPE =
  'type Json<T> = T extends string ? `${T}` : T extends number | boolean | null | undefined ? T : T extends ReadonlyArray<infer U> ? Array<Json<U>> : T extends object ? { [K in keyof T]: Json<T[K]> } : T;';

let cachedHost = null; // the packages' and TypeScript's own .d.ts files, parsed once per process

export function typescriptVersion() {
  return require('typescript').version;
}

// imports: TypeScript import lines; entries: [{at, value, type}] (type: a TypeScript type
// expression using the imports). Returns [string]: empty when every value fits its type.
export function typeCheck(imports, entries) {
  const ts = require('typescript');
  const lines = [...imports, JSON_TYPE];
  const owners = []; // [firstLine, lastLine, at]
  entries.forEach(({ at, value, type }, i) => {
    const first = lines.length;
    lines.push(...`export const value_${i} = ${JSON.stringify(value, null, 2)} satisfies Json<${type}>;`.split('\n'));
    owners.push([first, lines.length - 1, at]);
  });
  const text = lines.join('\n');
  const fileName = path.join(TESTS_DIR, '__fleetgate_type_check__.ts');
  const options = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    skipLibCheck: true, // the packages' own .d.ts files are their authors' business
    types: [],
  };
  const host = ts.createCompilerHost(options);
  if (!cachedHost || cachedHost.ts !== ts) {
    cachedHost = { ts, files: new Map() };
  }
  const cache = cachedHost.files;
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
  const textLines = text.split('\n');
  return diagnostics.map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n    ');
    if (d.file && d.start !== undefined) {
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      const owner = owners.find(([a, b]) => line >= a && line <= b);
      return `${owner ? owner[2] : 'generated module'} (${textLines[line].trim().slice(0, 100)}): ${message}`;
    }
    return message;
  });
}
