// mcp-bridge end to end with the official MCP TypeScript SDK (the SDK of Claude Desktop,
// Claude Code, Cursor, VS Code and the MCP Inspector), against a real batond.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Daemon, connect, text } from './harness.mjs';

let daemon;
before(async () => {
  daemon = await Daemon.start();
});
after(async () => {
  await daemon?.remove();
});

test('the bridge lists its tools and answers a write and a read', async () => {
  const client = await connect(daemon.socket);
  try {
    assert.ok(client.baton.tools.baton_claim && client.baton.tools.baton_set);
    const created = await client.callTool({
      name: 'baton_set',
      arguments: { namespace: 'smoke', key: 'k', value: { n: 1 }, expected_version: 0 },
    });
    assert.ok(!created.isError, text(created));
    assert.equal(created.structuredContent.version, 1);
    const got = await client.callTool({ name: 'baton_get', arguments: { namespace: 'smoke', key: 'k' } });
    assert.deepEqual(got.structuredContent.value, { n: 1 });
  } finally {
    await client.close();
  }
});
