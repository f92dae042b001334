// Every error class of mcp-bridge as a client built on the official MCP TypeScript SDK
// sees it. That SDK checks a result's structuredContent against the tool's outputSchema
// even when isError is set, and throws when it does not match; so each error below must
// come back from callTool as a result, with isError and a hint naming the next baton_*
// tool, in one sentence that names no daemon method.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import Ajv from 'ajv';

import { Daemon, connect, text } from './harness.mjs';

// Daemon method names and other wire-protocol words a hint must not show an MCP client.
const DAEMON_WORDS =
  /\b(AcquireResourceLock|HeartbeatResourceLock|ReleaseResourceLock|ResourceLockStatus|WaitResourceLock|ListResourceLocks|RegisterTask|AcquireNextNode|HeartbeatNode|CompleteNode|FailNode|TaskStatus|ListTasks|CancelTask|CommitEvent|ReadEvents|DescribeInterface|Txn|data\.\w+)\b/;

/** Asserts `result` is an error result the SDK let through, with a usable hint. */
function assertHint(client, tool, result, ...patterns) {
  assert.equal(result.isError, true, `expected an error result: ${text(result)}`);
  const hint = result.content[0]?.text ?? '';
  if (process.env.BATON_SHOW_HINTS) console.log(`${tool}: ${text(result)}`);
  assert.match(hint, /\bbaton_[a-z_]+\b/, `the hint names a baton_* tool: ${hint}`);
  assert.doesNotMatch(text(result), DAEMON_WORDS, `no daemon method name: ${text(result)}`);
  // Two sentences run together ("...with baton_claim Your lease...") read as one garbled one.
  assert.doesNotMatch(hint, /[a-z0-9_)`] (Your|The|It|This|Call|Check|Stop|Retry)\b/, `sentences run together: ${hint}`);
  for (const pattern of patterns) assert.match(hint, pattern, hint);
  if (result.structuredContent !== undefined) {
    const schema = client.baton.tools[tool].outputSchema;
    const validate = new Ajv({ strict: true, allErrors: true }).compile(schema);
    assert.ok(validate(result.structuredContent), `structuredContent matches ${tool}'s outputSchema: ${JSON.stringify(validate.errors)}`);
  }
  return hint;
}

let daemon;
let a;
let b;
before(async () => {
  daemon = await Daemon.start();
  a = await connect(daemon.socket, '--tools', 'all', '--owner', 'alice');
  b = await connect(daemon.socket, '--tools', 'all', '--owner', 'bob');
});
after(async () => {
  await a?.close();
  await b?.close();
  await daemon?.remove();
});

const call = (client, name, args) => client.callTool({ name, arguments: args });

test('a stale expected_version on baton_set is a conflict naming baton_get and the current version', async () => {
  await call(a, 'baton_set', { namespace: 'c', key: 'q3', value: { usd: 1 }, expected_version: 0 });
  await call(a, 'baton_set', { namespace: 'c', key: 'q3', value: { usd: 2 }, expected_version: 1 });
  const stale = await call(b, 'baton_set', { namespace: 'c', key: 'q3', value: { usd: 3 }, expected_version: 1 });
  assertHint(b, 'baton_set', stale, /baton_get/, /expected_version 2/);
  assert.match(text(stale), /"usd":2/, 'the details carry the current value to merge into');
  const missing = await call(b, 'baton_set', { namespace: 'c', key: 'absent', value: 1, expected_version: 4 });
  assertHint(b, 'baton_set', missing, /does not exist/, /expected_version 0/);
});

test('deleting a missing key says there is nothing to delete, and nothing else', async () => {
  const result = await call(b, 'baton_delete', { namespace: 'c', key: 'never', expected_version: 1 });
  const hint = assertHint(b, 'baton_delete', result, /nothing to delete/);
  assert.doesNotMatch(text(result), /create/, hint);
});

test('a failed transaction compare names baton_get and baton_txn', async () => {
  const ops = [{ op: 'set', namespace: 'c', key: 'q3', value: 9 }];
  const result = await call(b, 'baton_txn', { compare: [{ namespace: 'c', key: 'q3', version: 1 }], ops });
  assertHint(b, 'baton_txn', result, /baton_get/, /baton_txn/, /nothing was written/);
});

test('a busy claim names the holder and baton_wait', async () => {
  const held = await call(a, 'baton_claim', { resource_key: 'tool:busy' });
  assert.equal(held.structuredContent.status, 'acquired');
  const busy = await call(b, 'baton_claim', { resource_key: 'tool:busy' });
  assertHint(b, 'baton_claim', busy, /alice/, /baton_wait/);
  await call(a, 'baton_release', { resource_key: 'tool:busy', lease_id: held.structuredContent.lease_id });
});

test('a stale lease on heartbeat and release names baton_claim', async () => {
  const held = await call(a, 'baton_claim', { resource_key: 'tool:stale' });
  const { lease_id } = held.structuredContent;
  await call(a, 'baton_release', { resource_key: 'tool:stale', lease_id });
  const beat = await call(a, 'baton_heartbeat', { resource_key: 'tool:stale', lease_id });
  assertHint(a, 'baton_heartbeat', beat, /baton_claim/, /tool:stale/);
  const again = await call(a, 'baton_release', { resource_key: 'tool:stale', lease_id });
  assertHint(a, 'baton_release', again, /nothing to release/);
  // Someone else's lease now: the hint names the holder.
  const other = await call(b, 'baton_claim', { resource_key: 'tool:stale' });
  const theirs = await call(a, 'baton_heartbeat', { resource_key: 'tool:stale', lease_id });
  assertHint(a, 'baton_heartbeat', theirs, /bob/, /baton_claim/);
  await call(b, 'baton_release', { resource_key: 'tool:stale', lease_id: other.structuredContent.lease_id });
});

test('a missing task or node is an error naming how to find the right id', async () => {
  const task = await call(a, 'baton_task_status', { task_id: 'no-such-task' });
  assertHint(a, 'baton_task_status', task, /no-such-task/, /does not exist/);
  const reg = await call(a, 'baton_task_register', { goal: 'g', nodes: [{ id: 'only' }] });
  const node = await call(a, 'baton_task_heartbeat', { task_id: reg.structuredContent.task_id, node_id: 'ghost', lease_id: 'x' });
  assertHint(a, 'baton_task_heartbeat', node, /ghost/, /baton_task_status/);
});

test('completing a node twice says it is done, without claiming the lease is lost', async () => {
  const reg = await call(a, 'baton_task_register', { goal: 'twice', nodes: [{ id: 'one' }] });
  const task_id = reg.structuredContent.task_id;
  const node = (await call(a, 'baton_task_next', { task_id })).structuredContent;
  const args = { task_id, node_id: 'one', lease_id: node.lease_id, result: 1 };
  assert.ok(!(await call(a, 'baton_task_complete', args)).isError);
  const twice = await call(a, 'baton_task_complete', args);
  const hint = assertHint(a, 'baton_task_complete', twice, /already completed/i);
  assert.doesNotMatch(hint, /gone|lapsed|lost/, hint);
});

test('a task heartbeat with a wrong lease does not blame another worker', async () => {
  const reg = await call(a, 'baton_task_register', { goal: 'wrong lease', nodes: [{ id: 'n' }] });
  const task_id = reg.structuredContent.task_id;
  const node = (await call(a, 'baton_task_next', { task_id })).structuredContent;
  assert.equal(node.status, 'acquired');
  const beat = await call(a, 'baton_task_heartbeat', { task_id, node_id: 'n', lease_id: 'not-the-lease' });
  const hint = assertHint(a, 'baton_task_heartbeat', beat, /lease_id/, /baton_task_next/);
  assert.doesNotMatch(hint, /another worker/, hint);
  // bob's wrong lease on alice's node: that one is held by another worker.
  const theirs = await call(b, 'baton_task_heartbeat', { task_id, node_id: 'n', lease_id: 'not-the-lease' });
  assertHint(b, 'baton_task_heartbeat', theirs, /alice/);
  await call(a, 'baton_task_complete', { task_id, node_id: 'n', lease_id: node.lease_id });
});

test('a value over the line limit is refused, not of unknown outcome', async () => {
  const big = 'x'.repeat((1 << 20) + 10);
  const result = await call(a, 'baton_set', { namespace: 'c', key: 'big', value: big, expected_version: 0 });
  const hint = assertHint(a, 'baton_set', result, /refused/, /nothing was written/);
  assert.doesNotMatch(hint, /unknown/, hint);
  const got = await call(a, 'baton_get', { namespace: 'c', key: 'big' });
  assert.equal(got.structuredContent.found, false);
});

test('a value over BATON_MAX_VALUE_BYTES is refused', async () => {
  const small = await Daemon.start({ BATON_MAX_VALUE_BYTES: '1024' });
  const client = await connect(small.socket);
  try {
    const result = await call(client, 'baton_set', { namespace: 'c', key: 'big', value: 'y'.repeat(2000), expected_version: 0 });
    const hint = assertHint(client, 'baton_set', result, /refused/, /1024/);
    assert.doesNotMatch(hint, /unknown/, hint);
  } finally {
    await client.close();
    await small.remove();
  }
});

test('an unreachable daemon is an error that says how to start batond', async () => {
  const doomed = await Daemon.start();
  const client = await connect(doomed.socket);
  try {
    assert.ok(!(await call(client, 'baton_get', { namespace: 'p', key: 'k' })).isError);
    await doomed.stop();
    const result = await call(client, 'baton_get', { namespace: 'p', key: 'k' });
    assertHint(client, 'baton_get', result, /batond is not running/, /baton_get/);
    const fresh = await connect(doomed.socket);
    try {
      const first = await call(fresh, 'baton_claim', { resource_key: 'tool:x' });
      assertHint(fresh, 'baton_claim', first, /batond is not running/);
    } finally {
      await fresh.close();
    }
  } finally {
    await client.close();
    await doomed.remove();
  }
});

const BAD_ARGUMENTS = [
  ['missing', 'baton_get', { namespace: 'p' }, [/"key"/]],
  ['unknown', 'baton_get', { namespace: 'p', key: 'k', version: 1 }, [/"version"/, /namespace, key/]],
  ['wrong type', 'baton_get', { namespace: 'p', key: 5 }, [/"key"/, /string/]],
  ['wrong type, nested', 'baton_txn', { ops: [{ op: 'set', namespace: 'p', key: 7 }] }, [/ops\[0\]\.key/, /string/]],
  ['out of range, ttl_secs', 'baton_claim', { resource_key: 'tool:r', ttl_secs: 0 }, [/ttl_secs/, /1 to 604800/]],
  ['out of range, ttl_secs above', 'baton_claim', { resource_key: 'tool:r', ttl_secs: 604801 }, [/ttl_secs/, /604800/]],
  ['out of range, wait_ms', 'baton_claim', { resource_key: 'tool:r', wait_ms: 3_600_001 }, [/wait_ms/, /3600000/]],
  ['out of range, timeout_ms', 'baton_wait', { resource_key: 'tool:r', timeout_ms: 3_600_001 }, [/timeout_ms/, /3600000/]],
  ['out of range, limit', 'baton_list', { namespace: 'p', limit: 5000 }, [/limit/, /1000/]],
  ['negative', 'baton_set', { namespace: 'p', key: 'k', value: 1, expected_version: -1 }, [/expected_version/]],
  ['not in the enum', 'baton_release', { resource_key: 'tool:r', lease_id: 'l', outcome: 'done' }, [/outcome/, /modified/]],
];

for (const [kind, tool, args, patterns] of BAD_ARGUMENTS) {
  test(`bad arguments (${kind}) to ${tool} are an error result saying what to send`, async () => {
    const result = await call(a, tool, args);
    assertHint(a, tool, result, new RegExp(tool), ...patterns);
  });
}

test('an unknown tool stays a protocol error', async () => {
  await assert.rejects(call(a, 'baton_nope', {}), /baton_nope/);
});
