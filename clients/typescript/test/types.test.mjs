// The TypeScript declarations: src/wire/ is what DescribeInterface says today (else
// `npm run gen-types`), every declaration compiles with a typical user's code
// (test/typecheck.ts, with TypeScript pinned in package-lock.json), and the declarations
// name exactly what the JavaScript exports, method for method.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import * as runtime from '../src/index.js';
import { committed, describeAt, generate } from '../scripts/gen-types.mjs';
import { Daemon, PACKAGE } from './harness.mjs';

const TSC = join(PACKAGE, 'node_modules', 'typescript', 'bin', 'tsc');
const missing = `TypeScript is not installed in clients/typescript: run \`npm ci --prefix clients/typescript\` (scripts/node-env does)`;

let daemon;
before(async () => {
  daemon = await Daemon.start();
});
after(async () => {
  await daemon?.remove();
});

test('src/wire/ is what DescribeInterface says (else run `npm run gen-types` and commit it)', async () => {
  const fresh = generate(await describeAt(daemon.socket));
  const files = committed();
  assert.deepEqual(Object.keys(files), Object.keys(fresh).sort(), 'src/wire/ has other files than gen-types.mjs writes');
  for (const [name, text] of Object.entries(fresh)) {
    assert.ok(
      files[name] === text,
      `src/wire/${name} no longer matches DescribeInterface: run \`npm run gen-types\` in clients/typescript and commit the result`,
    );
  }
});

test('the declarations and test/typecheck.ts compile under tsc --strict', () => {
  assert.ok(existsSync(TSC), missing);
  try {
    execFileSync(process.execPath, [TSC, '-p', PACKAGE], { stdio: 'pipe', encoding: 'utf8' });
  } catch (err) {
    assert.fail(`tsc found errors:\n${err.stdout}${err.stderr}`);
  }
});

test('the declarations name exactly what the JavaScript exports, and every public method', () => {
  assert.ok(existsSync(TSC), missing);
  const ts = createRequire(import.meta.url)(join(PACKAGE, 'node_modules', 'typescript'));
  const index = join(PACKAGE, 'src', 'index.d.ts');
  const program = ts.createProgram([index], {
    module: ts.ModuleKind.Node16,
    moduleResolution: ts.ModuleResolutionKind.Node16,
    types: ['node'],
    lib: ['lib.es2022.d.ts', 'lib.esnext.disposable.d.ts'],
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const exported = checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(index)));
  const values = new Map();
  for (const symbol of exported) {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    // `export type * as wire` is a namespace of types alone.
    if (target.flags & ts.SymbolFlags.Value && !(target.flags & ts.SymbolFlags.Module)) values.set(symbol.getName(), target);
  }
  assert.deepEqual([...values.keys()].sort(), Object.keys(runtime).sort(), 'the values index.d.ts declares are not what index.js exports');

  for (const [name, symbol] of values) {
    const Class = runtime[name];
    if (!(symbol.flags & ts.SymbolFlags.Class)) continue;
    const declared = new Set(
      checker
        .getPropertiesOfType(checker.getDeclaredTypeOfSymbol(symbol))
        .map((p) => p.getName())
        .filter((n) => !n.startsWith('__@')),
    );
    const methods = [];
    for (let proto = Class.prototype; proto && proto !== Object.prototype && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
      if (proto.constructor.name === 'EventEmitter') break;
      methods.push(...Object.getOwnPropertyNames(proto).filter((n) => n !== 'constructor'));
    }
    const undeclared = methods.filter((m) => !declared.has(m));
    assert.deepEqual(undeclared, [], `${name} has members index.d.ts does not declare`);
    const statics = Object.getOwnPropertyNames(Class).filter((n) => !['length', 'name', 'prototype'].includes(n));
    const declaredStatics = new Set(checker.getPropertiesOfType(checker.getTypeOfSymbol(symbol)).map((p) => p.getName()));
    assert.deepEqual(statics.filter((s) => !declaredStatics.has(s)), [], `${name} has statics index.d.ts does not declare`);
  }
});
