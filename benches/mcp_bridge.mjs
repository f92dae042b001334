// mcp-bridge round trips with the official MCP TypeScript SDK (the one most MCP hosts are
// built on): sequential baton_get and baton_set calls through one bridge session against
// a fresh release batond, as benches/mcp_bridge.py does with the Python SDK.
// Usage: BATON_BIN_DIR=target/release node benches/mcp_bridge.mjs [CALLS]
// The SDK comes from tests/ts/node_modules (scripts/test or scripts/bench installs it).

import { Daemon, connect } from '../tests/ts/harness.mjs';

const calls = Number(process.argv[2] ?? 1000);
const median = (xs) => xs[Math.floor(xs.length / 2)];
const p99 = (xs) => xs[Math.floor(xs.length * 0.99)];

const daemon = await Daemon.start();
let client;
try {
  client = await connect(daemon.socket);
  const call = async (name, args) => {
    const result = await client.callTool({ name, arguments: args });
    if (result.isError) throw new Error(`${name} failed: ${JSON.stringify(result.content)}`);
    return result;
  };
  await call('baton_set', { namespace: 'bench', key: 'k', value: { usd: 1 }, force: true });
  const gets = [];
  const sets = [];
  let result;
  for (let i = 0; i < calls; i++) {
    const start = process.hrtime.bigint();
    result = await call('baton_get', { namespace: 'bench', key: 'k' });
    gets.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  let version = result.structuredContent.version;
  for (let i = 0; i < calls; i++) {
    const start = process.hrtime.bigint();
    result = await call('baton_set', { namespace: 'bench', key: 'k', value: { usd: version }, expected_version: version });
    sets.push(Number(process.hrtime.bigint() - start) / 1e6);
    version = result.structuredContent.version;
  }
  gets.sort((a, b) => a - b);
  sets.sort((a, b) => a - b);
  const rows = [
    [`MCP (TS SDK) baton_get, ${calls} seq.`, `median ${median(gets).toFixed(2)} ms, p99 ${p99(gets).toFixed(2)} ms`, 'median <= 1.5 ms', median(gets) <= 1.5],
    [`MCP (TS SDK) baton_set, ${calls} seq.`, `median ${median(sets).toFixed(2)} ms, p99 ${p99(sets).toFixed(2)} ms`, 'median <= 3 ms', median(sets) <= 3],
  ];
  for (const [name, figure, target, ok] of rows) {
    console.log(`${name.padEnd(36)} ${figure.padEnd(48)} ${target.padEnd(18)} ${ok ? 'PASS' : 'MISS'}`);
  }
} finally {
  await client?.close();
  await daemon.remove();
}
