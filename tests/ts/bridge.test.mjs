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

test('agents join, message each other and acknowledge through the TypeScript SDK', async () => {
  const alice = await connect(daemon.socket, '--tools', 'agents,locks');
  const bob = await connect(daemon.socket, '--tools', 'agents', '--agent', 'ts-bob');
  try {
    const early = await alice.callTool({ name: 'baton_inbox', arguments: {} });
    assert.ok(early.isError && text(early).includes('baton_join'), text(early));
    const joined = await alice.callTool({ name: 'baton_join', arguments: { name: 'ts-alice' } });
    assert.ok(!joined.isError, text(joined));
    assert.equal(joined.structuredContent.session_id, undefined);
    const sent = await alice.callTool({
      name: 'baton_send',
      arguments: { to: ['ts-bob'], body: { hello: 'bob' }, subject: 'hi' },
    });
    assert.ok(!sent.isError, text(sent));
    const inbox = await bob.callTool({ name: 'baton_inbox', arguments: { wait_ms: 30000 } });
    assert.ok(!inbox.isError, text(inbox));
    const [message] = inbox.structuredContent.messages;
    assert.equal(message.from, 'ts-alice');
    assert.deepEqual(message.body, { hello: 'bob' });
    const acked = await bob.callTool({ name: 'baton_ack', arguments: { up_to: message.seq } });
    assert.deepEqual(acked.structuredContent, { acked: 1, unread: 0 });
    const star = await alice.callTool({ name: 'baton_send', arguments: { to: '*', body: 'all' } });
    assert.ok(!star.isError, text(star));
    const bad = await alice.callTool({ name: 'baton_send', arguments: { to: 'ts-bob', body: 1 } });
    assert.ok(bad.isError, 'a bare name is not a list');
  } finally {
    await alice.close();
    await bob.close();
  }
});

test('a write fenced by a claim that was lost is refused through the TypeScript SDK', async () => {
  const first = await connect(daemon.socket, '--tools', 'all', '--agent', 'ts-first');
  const second = await connect(daemon.socket, '--tools', 'all', '--agent', 'ts-second');
  try {
    assert.ok(first.baton.tools.baton_set.inputSchema.properties.fence);
    const claim = await first.callTool({ name: 'baton_claim', arguments: { resource_key: 'file:ts-report.md' } });
    assert.ok(!claim.isError, text(claim));
    // The SDK checked structuredContent, fence included, against baton_claim's outputSchema.
    const { fence } = claim.structuredContent;
    assert.deepEqual(fence, { resource_key: 'file:ts-report.md', lease_id: claim.structuredContent.lease_id });
    const draft = await first.callTool({
      name: 'baton_set',
      arguments: { namespace: 'ts-docs', key: 'report', value: 'draft 1', expected_version: 0, fence },
    });
    assert.ok(!draft.isError, text(draft));

    // ts-first stalls past its lease: its claim ends, and ts-second takes the file over.
    await daemon.call('BreakLock', { resource_key: 'file:ts-report.md', reason: 'ts-first stalled past its lease' });
    const fresh = await second.callTool({ name: 'baton_claim', arguments: { resource_key: 'file:ts-report.md' } });
    assert.equal(fresh.structuredContent.status, 'acquired');

    const late = await first.callTool({
      name: 'baton_set',
      arguments: { namespace: 'ts-docs', key: 'report', value: 'late', expected_version: 1, fence },
    });
    assert.ok(late.isError, text(late));
    assert.equal(late.structuredContent, undefined);
    assert.match(late.content[0].text, /^Your claim on file:ts-report\.md was lost .*ts-second holds it now/);
    assert.match(late.content[0].text, /call baton_claim for file:ts-report\.md again/);
    const details = JSON.parse(late.content[1].text);
    assert.equal(details.kind, 'fenced');
    assert.equal(details.latest_fencing_token, fresh.structuredContent.fencing_token);
    const txn = await first.callTool({
      name: 'baton_txn',
      arguments: { ops: [{ op: 'set', namespace: 'ts-docs', key: 'report', value: 'late', fence }] },
    });
    assert.ok(txn.isError && text(txn).includes('was lost'), text(txn));
    assert.equal((await daemon.call('Get', { namespace: 'ts-docs', key: 'report' })).value, 'draft 1');

    const final = await second.callTool({
      name: 'baton_set',
      arguments: { namespace: 'ts-docs', key: 'report', value: 'final', expected_version: 1, fence: fresh.structuredContent.fence },
    });
    assert.ok(!final.isError, text(final));
    assert.equal(final.structuredContent.version, 2);
  } finally {
    await first.close();
    await second.close();
  }
});
