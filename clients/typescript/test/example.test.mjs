// The package as a user gets it and the Node example as a user runs it: `npm install` of
// clients/typescript into a fresh project (a packed copy, so what package.json's `files`
// leaves out is missing there too; --offline: the package has no dependencies), then
// scripts/examples/node_worker/worker.mjs run in that project against a real batond.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { Daemon, PACKAGE, ROOT } from './harness.mjs';

const run = promisify(execFile);
const EXAMPLE = join(ROOT, 'scripts', 'examples', 'node_worker', 'worker.mjs');

let daemon;
let project;
before(async () => {
  daemon = await Daemon.start();
  project = mkdtempSync(join(tmpdir(), 'baton-tsclient-project-'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'my-agents', private: true, type: 'module' }));
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--install-links', PACKAGE], { cwd: project, timeout: 120_000 });
});
after(async () => {
  await daemon?.remove();
  if (project) rmSync(project, { recursive: true, force: true });
});

test('npm install ./clients/typescript gives a package with its code and types, and no dependency', () => {
  const installed = join(project, 'node_modules', 'baton-client');
  const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
  assert.equal(manifest.name, 'baton-client');
  assert.deepEqual(manifest.dependencies ?? {}, {});
  for (const file of ['src/index.js', 'src/index.d.ts', 'src/wire/index.d.ts', 'src/wire/state.d.ts', 'src/errors.d.ts', 'README.md']) {
    assert.ok(readFileSync(join(installed, file), 'utf8').length > 0, file);
  }
  const lock = JSON.parse(readFileSync(join(project, 'package-lock.json'), 'utf8'));
  assert.deepEqual(Object.keys(lock.packages).sort(), ['', 'node_modules/baton-client']);
});

test('the Node worker example runs its release DAG to the end', async () => {
  copyFileSync(EXAMPLE, join(project, 'worker.mjs'));
  const { stdout } = await run(process.execPath, ['worker.mjs', '--socket', daemon.socket], { cwd: project, timeout: 120_000 });
  const lines = stdout.trim().split('\n');
  assert.deepEqual(lines, [
    'registered task "ship a release": 5 nodes',
    '  fetch: COMPLETED -> {"sources":["core","cli","docs"],"fetched":3}',
    '  test-linux: COMPLETED after 2 attempts -> {"os":"linux","passed":30,"attempt":2}',
    '  test-macos: COMPLETED -> {"os":"macos","passed":30,"attempt":1}',
    '  package: COMPLETED -> {"file":"dist/release.tar","passed":60,"fencing_token":1}',
    '  announce: COMPLETED -> {"text":"released dist/release.tar (60 tests passed)"}',
    'task completed: 5 of 5 nodes, 6 hand-outs to 3 workers',
    'release/artifact at version 1: {"file":"dist/release.tar","passed":60}; file:dist/release.tar is available, last created',
  ]);
  // Each test node recorded its progress in the task's journal, under the worker's name.
  const { events } = await daemon.call('ReadEvents', { types: ['node.progress'] });
  assert.deepEqual(events.map((e) => [e.node_id, e.data.os]).sort(), [['test-linux', 'linux'], ['test-macos', 'macos']]);
  assert.ok(events.every((e) => /^node-worker-[123]$/.test(e.actor)), JSON.stringify(events));
});
