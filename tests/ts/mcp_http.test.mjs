// MCP over HTTP at batond's /mcp with the official MCP TypeScript SDK's Streamable HTTP
// client (what Claude Code, Cursor and VS Code use for `--transport http` servers): tools,
// calls, errors as results, tokens and grants, and a session that ends ending its claims.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { Daemon, dashboardUrl, text } from './harness.mjs';

let daemon;
let mcpUrl;
before(async () => {
  daemon = await Daemon.start({ BATON_HTTP_LISTEN: '127.0.0.1:0' });
  mcpUrl = new URL('/mcp', await dashboardUrl(daemon)).href;
});
after(async () => {
  await daemon?.remove();
});

async function token(name, ...scopes) {
  return (await daemon.call('CreateToken', { name, scopes })).token;
}

async function open(secret, query = '') {
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl + query), {
    requestInit: { headers: { Authorization: `Bearer ${secret}` } },
  });
  const client = new Client({ name: 'baton-ts-http-test', version: '1.0.0' });
  await client.connect(transport);
  // As the hosts do: listing the tools makes the SDK check results against outputSchema.
  await client.listTools();
  return { client, transport };
}

test('tools are listed and called over /mcp, errors are results', async () => {
  const { client, transport } = await open(await token('ts-builder', 'kv:write:*', 'locks:*'));
  try {
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === 'baton_claim') && tools.some((t) => t.name === 'baton_set'));
    const set = await client.callTool({
      name: 'baton_set',
      arguments: { namespace: 'ts', key: 'k', value: [1, 2], expected_version: 0 },
    });
    assert.ok(!set.isError, text(set));
    const got = await client.callTool({ name: 'baton_get', arguments: { namespace: 'ts', key: 'k' } });
    assert.deepEqual(got.structuredContent.value, [1, 2]);
    const stale = await client.callTool({
      name: 'baton_set',
      arguments: { namespace: 'ts', key: 'k', value: 3, expected_version: 0 },
    });
    assert.ok(stale.isError && text(stale).includes('baton_get'), text(stale));
  } finally {
    await transport.terminateSession();
    await client.close();
  }
});

test('a wrong token is refused with 401', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), {
    requestInit: { headers: { Authorization: 'Bearer wrong' } },
  });
  const client = new Client({ name: 'baton-ts-http-test', version: '1.0.0' });
  await assert.rejects(client.connect(transport), (err) => {
    assert.match(String(err), /401|token/i);
    return true;
  });
});

test('a token without the grant gets the grant named', async () => {
  const { client, transport } = await open(await token('ts-reader', 'kv:read:*'));
  try {
    const refused = await client.callTool({
      name: 'baton_set',
      arguments: { namespace: 'ts', key: 'r', value: 1, expected_version: 0 },
    });
    assert.ok(refused.isError, text(refused));
    assert.ok(text(refused).includes('kv:write:ts'), text(refused));
  } finally {
    await transport.terminateSession();
    await client.close();
  }
  assert.equal((await daemon.call('Get', { namespace: 'ts', key: 'r' })).found, false);
});

test('ending the session releases its claims', async () => {
  const { client, transport } = await open(await token('ts-editor', 'locks:*'));
  const claim = await client.callTool({ name: 'baton_claim', arguments: { resource_key: 'file:ts/app.ts' } });
  assert.ok(!claim.isError, text(claim));
  assert.equal((await daemon.call('ResourceLockStatus', { resource_key: 'file:ts/app.ts' })).status, 'held');
  await transport.terminateSession();
  await client.close();
  // The session's connections close as its DELETE is served; look until the release
  // shows (a bound, not a guess: it is at once unless something is wrong).
  const deadline = Date.now() + 10_000;
  let status;
  do {
    status = (await daemon.call('ResourceLockStatus', { resource_key: 'file:ts/app.ts' })).status;
  } while (status !== 'available' && Date.now() < deadline);
  assert.equal(status, 'available');
});
