// The Node client's Get/Set round trip against the Python client's, in the same run on
// one fresh batond: sequential Get, sequential compare-and-set Set (durable), and Gets
// pipelined on one connection, through clients/typescript and through clients/python
// (sync Client and AsyncClient, run by benches/python_client.py). The two take turns,
// three rounds each, and the medians of the rounds are compared. Figures only: nothing
// is asserted.
// Usage: BATON_BIN_DIR=target/release [BATON_PYTHON=python3] node benches/node_client.mjs [CALLS]

import { execFile } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { Client } from '../clients/typescript/src/index.js';
import { Daemon } from '../clients/typescript/test/harness.mjs';

const ROOT = resolve(fileURLToPath(import.meta.url), '..', '..');
const calls = Number(process.argv[2] ?? 1000);
const rounds = 3;
const python = process.env.BATON_PYTHON ?? 'python3';

const ms = (start) => Number(process.hrtime.bigint() - start) / 1e6;
const figures = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)], p99: sorted[Math.floor(sorted.length * 0.99)] };
};
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function node(socket) {
  const c = new Client(socket);
  await c.set('bench-node', 'k', { usd: 0 });
  for (let i = 0; i < 200; i++) await c.get('bench-node', 'k'); // warm up (connection, JIT)
  const gets = [];
  for (let i = 0; i < calls; i++) {
    const start = process.hrtime.bigint();
    await c.get('bench-node', 'k');
    gets.push(ms(start));
  }
  let { version } = await c.get('bench-node', 'k');
  const sets = [];
  for (let i = 0; i < calls; i++) {
    const start = process.hrtime.bigint();
    ({ version } = await c.set('bench-node', 'k', { usd: version }, { expected_version: version }));
    sets.push(ms(start));
  }
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: calls }, () => c.get('bench-node', 'k')));
  const pipelined = calls / (ms(start) / 1000);
  c.close();
  return { get: figures(gets), set: figures(sets), pipelined_gets_per_sec: { value: pipelined } };
}

async function py(socket) {
  const { stdout } = await promisify(execFile)(python, [join(ROOT, 'benches', 'python_client.py'), socket, String(calls)], {
    maxBuffer: 1 << 20,
  });
  return JSON.parse(stdout);
}

const daemon = await Daemon.start();
const runs = { node: [], sync: [], asyncio: [] };
try {
  for (let round = 0; round < rounds; round++) {
    runs.node.push(await node(daemon.socket));
    const other = await py(daemon.socket);
    runs.sync.push(other.sync);
    runs.asyncio.push(other.asyncio);
  }
} finally {
  await daemon.remove();
}

const of = (client, what, field) => median(runs[client].map((r) => r[what][field]));
const rows = [];
for (const [what, label] of [['get', 'Get'], ['set', 'Set (CAS, durable)']]) {
  const n = of('node', what, 'median');
  rows.push([
    `${label}, ${calls} sequential`,
    `Node median ${n.toFixed(3)} ms (p99 ${of('node', what, 'p99').toFixed(3)})`,
    `Python sync ${of('sync', what, 'median').toFixed(3)} ms = ${(n / of('sync', what, 'median')).toFixed(2)}x`,
    `asyncio ${of('asyncio', what, 'median').toFixed(3)} ms = ${(n / of('asyncio', what, 'median')).toFixed(2)}x`,
  ]);
}
const rate = (client) => of(client, 'pipelined_gets_per_sec', 'value');
rows.push([
  `Get, ${calls} pipelined on one connection`,
  `Node ${Math.round(rate('node'))}/s`,
  `Python pipeline() ${Math.round(rate('sync'))}/s = ${(rate('sync') / rate('node')).toFixed(2)}x`,
  `gather ${Math.round(rate('asyncio'))}/s = ${(rate('asyncio') / rate('node')).toFixed(2)}x`,
]);
console.log(`Node client against the Python client: medians of ${rounds} alternated rounds; each ratio is Node's time per call over Python's (< 1x: Node is faster)`);
for (const row of rows) console.log(`${row[0].padEnd(40)} ${row[1].padEnd(38)} ${row[2].padEnd(34)} ${row[3]}`);
