// mcp-bridge round trips with the official MCP TypeScript SDK (the one most MCP hosts are
// built on): sequential baton_get and baton_set calls through one session against a fresh
// release batond, as benches/mcp_bridge.py does with the Python SDK; and what checking a
// baton_get result against its outputSchema costs this SDK's own validator, with the
// schema as served and in its form before issue 39 (any-JSON fields as a six-branch anyOf).
// Then the same round trips over batond's own /mcp (Streamable HTTP, with a token).
// Usage: BATON_BIN_DIR=target/release node benches/mcp_bridge.mjs [CALLS]
// The SDK comes from tests/ts/node_modules (scripts/test or scripts/bench installs it).

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import { Daemon, connect, dashboardUrl } from '../tests/ts/harness.mjs';

// The SDK as tests/ts installed it (this file is outside that package): its validator
// with the options the client uses by default.
const require = createRequire(new URL('../tests/ts/package.json', import.meta.url));
const { AjvJsonSchemaValidator } = require('@modelcontextprotocol/sdk/validation/ajv');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const sdkPackage = new URL('../tests/ts/node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
const sdkVersion = JSON.parse(readFileSync(sdkPackage, 'utf8')).version;
const calls = Number(process.argv[2] ?? 1000);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p99 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.99)];
const ANY_JSON_BRANCHES = ['object', 'array', 'string', 'number', 'boolean', 'null'].map((type) => ({ type }));

/**
 * A connected client for a transport description: `{ kind: 'stdio', socket, args }` (an
 * mcp-bridge for the daemon's socket), or `{ kind: 'http', url, token }` (batond's own
 * `/mcp`, with the SDK's StreamableHTTPClientTransport).
 */
async function openSession(transport) {
  if (transport.kind === 'stdio') return connect(transport.socket, ...(transport.args ?? []));
  const http = new StreamableHTTPClientTransport(new URL(transport.url), {
    requestInit: { headers: { Authorization: `Bearer ${transport.token}` } },
  });
  const client = new Client({ name: 'baton-bench', version: '1.0.0' });
  await client.connect(http);
  const { tools } = await client.listTools();
  client.baton = { tools: Object.fromEntries(tools.map((t) => [t.name, t])) };
  return client;
}

/** Sequential baton_get then baton_set calls through `client`: their times, the last read. */
async function roundTrips(client) {
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
  const got = result.structuredContent;
  let version = got.version;
  for (let i = 0; i < calls; i++) {
    const start = process.hrtime.bigint();
    result = await call('baton_set', { namespace: 'bench', key: 'k', value: { usd: version }, expected_version: version });
    sets.push(Number(process.hrtime.bigint() - start) / 1e6);
    version = result.structuredContent.version;
  }
  return { gets, sets, got };
}

/** `schema` with each untyped property given the six typed branches (the form before issue 39). */
function withTypedAny(schema) {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) return schema;
  const out = { ...schema };
  if (schema.properties) {
    out.properties = Object.fromEntries(
      Object.entries(schema.properties).map(([name, p]) => [
        name,
        withTypedAny('type' in p || 'anyOf' in p ? p : { ...p, anyOf: ANY_JSON_BRANCHES }),
      ]),
    );
  }
  return out;
}

/** Median cost of one call of `check`, in ms, over batches of 1,000. */
function perCall(check, batches) {
  const times = [];
  for (let b = 0; b < batches; b++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < 1000; i++) check();
    times.push(Number(process.hrtime.bigint() - start) / 1e6 / 1000);
  }
  return median(times);
}

const daemon = await Daemon.start({ BATON_HTTP_LISTEN: '127.0.0.1:0' });
let client;
let overHttp;
try {
  client = await openSession({ kind: 'stdio', socket: daemon.socket });
  const { gets, sets, got } = await roundTrips(client);
  // The check the client runs on every baton_get result: the validator it compiled from
  // tools/list, against the same SDK validator compiled from the form before issue 39.
  const served = client.getToolOutputValidator('baton_get');
  const before = new AjvJsonSchemaValidator().getValidator(withTypedAny(client.baton.tools.baton_get.outputSchema));
  if (!served(got).valid || !before(got).valid) throw new Error('a baton_get result does not match its outputSchema');
  const batches = Math.max(calls / 50, 4);
  let now = 0;
  let then = 0;
  for (let turn = 0; turn < 4; turn++) {
    now += perCall(() => served(got), batches / 4);
    then += perCall(() => before(got), batches / 4);
  }
  now /= 4;
  then /= 4;
  // The same round trips over batond's own /mcp (Streamable HTTP), reported beside them.
  const url = new URL('/mcp', await dashboardUrl(daemon)).href;
  const { token } = await daemon.call('CreateToken', { name: 'bench', scopes: ['kv:write:bench'] });
  overHttp = await openSession({ kind: 'http', url, token });
  const http = await roundTrips(overHttp);
  const label = `MCP (TS SDK ${sdkVersion})`;
  const rows = [
    [`${label} baton_get, ${calls} seq.`, `median ${median(gets).toFixed(2)} ms, p99 ${p99(gets).toFixed(2)} ms`, 'median <= 1.5 ms', median(gets) <= 1.5],
    [`${label} baton_set, ${calls} seq.`, `median ${median(sets).toFixed(2)} ms, p99 ${p99(sets).toFixed(2)} ms`, 'median <= 3 ms', median(sets) <= 3],
    [`${label} check of a baton_get result`, `${(then * 1e3).toFixed(2)} us before, ${(now * 1e3).toFixed(2)} us now (${(then / now).toFixed(1)}x)`, 'now <= before', now <= then],
    [`${label} over /mcp baton_get, ${calls} seq.`, `median ${median(http.gets).toFixed(2)} ms, p99 ${p99(http.gets).toFixed(2)} ms`, '-', null],
    [`${label} over /mcp baton_set, ${calls} seq.`, `median ${median(http.sets).toFixed(2)} ms, p99 ${p99(http.sets).toFixed(2)} ms`, '-', null],
  ];
  for (const [name, figure, target, ok] of rows) {
    const verdict = ok === null ? '' : ok ? 'PASS' : 'MISS';
    console.log(`${name.padEnd(44)} ${figure.padEnd(54)} ${target.padEnd(18)} ${verdict}`.trimEnd());
  }
} finally {
  await client?.close();
  await overHttp?.close();
  await daemon.remove();
}
