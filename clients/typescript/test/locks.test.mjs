// Locks through the client, on batond's test clock (time moves only by AdvanceClock):
// heartbeats keep a lease past its TTL, a lost lease is noticed, fenced writes of a lost
// claim are refused, lock()/withLock() release with an honest outcome.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';

import { Client, FencedError, LeaseInvalidError, LeaseLostError, LockBusyError } from '../src/index.js';
import { Daemon } from './harness.mjs';

let daemon;
let c;
before(async () => {
  daemon = await Daemon.start({ clock: true });
  c = new Client(daemon.socket);
});
after(async () => {
  c?.close();
  await daemon?.remove();
});

test('heartbeats keep a lease alive far past its TTL on the test clock', async () => {
  const lease = await c.lock('file:kept.md', { owner: 'keeper', ttl_secs: 2, heartbeat_ms: 20 });
  for (let i = 0; i < 5; i++) {
    // Each step waits for a heartbeat to land, then moves the clock by 1.5 s: 7.5 s in
    // all against a TTL of 2 s.
    await once(lease, 'heartbeat');
    await daemon.advance(1500);
  }
  const status = await c.lockStatus('file:kept.md');
  assert.equal(status.status, 'held');
  assert.equal(status.held_by.owner, 'keeper');
  assert.equal(lease.lost, false);
  await c.set('docs', 'kept', 'written under the lease', { fence: lease });
  const released = await lease.release('modified');
  assert.deepEqual([released.status, released.outcome], ['released', 'modified']);
  assert.equal((await c.lockStatus('file:kept.md')).previous.outcome, 'modified');
  // A second release does nothing more.
  assert.equal(await lease.release(), released);
});

test('without heartbeats the lease lapses, its fenced writes are refused, and a token fence too', async () => {
  const lease = await c.lock('file:report.md', { owner: 'writer-a', ttl_secs: 2, heartbeat_ms: 0 });
  assert.equal(lease.fencing_token > 0, true);
  await c.set('docs', 'report', 'draft 1', { fence: lease });
  await daemon.advance(2500);
  const late = await c.set('docs', 'report', 'draft 2', { fence: lease }).catch((e) => e);
  assert.ok(late instanceof FencedError, String(late));
  assert.deepEqual([late.code, late.kind, late.heldBy], [409, 'fenced', null]);
  assert.equal(late.resourceKey, 'file:report.md');

  const b = await c.lock('file:report.md', { owner: 'writer-b', ttl_secs: 60, heartbeat_ms: 0 });
  assert.equal(b.fencing_token, lease.fencing_token + 1);
  const overtaken = await c.set('docs', 'report', 'draft 3', { fence: lease.tokenFence }).catch((e) => e);
  assert.ok(overtaken instanceof FencedError);
  assert.equal(overtaken.heldBy.owner, 'writer-b');
  assert.equal(overtaken.latestFencingToken, b.fencing_token);
  assert.equal((await c.checkFence('file:report.md', lease.fencing_token)).latest, false);
  assert.equal((await c.checkFence('file:report.md', b.fencing_token)).latest, true);

  // Txn ops, publish and delete carry fences too; nothing of a refused one is written.
  const txn = await c.txn([], [{ op: 'set', namespace: 'docs', key: 'report', value: 'x' }], { fence: lease }).catch((e) => e);
  assert.ok(txn instanceof FencedError);
  assert.ok((await c.publish('note', { n: 1 }, { fence: lease }).catch((e) => e)) instanceof FencedError);
  assert.ok((await c.delete('docs', 'report', { fence: lease }).catch((e) => e)) instanceof FencedError);
  await c.set('docs', 'report', "b's report", { fence: b });
  const report = await c.get('docs', 'report');
  assert.deepEqual([report.value, report.version], ["b's report", 2]);

  // Releasing the lost lease: LeaseLostError, as leaving Python's `with` block raises.
  const released = await lease.release().catch((e) => e);
  assert.ok(released instanceof LeaseLostError);
  assert.equal(lease.lost, true);
  assert.ok(lease.signal.aborted);
  await b.release();
});

test('a heartbeat that finds the lease gone marks it lost, aborts its signal and emits lost', async () => {
  const lease = await c.lock('file:lost.md', { owner: 'sleepy', ttl_secs: 1, heartbeat_ms: 20 });
  const lost = once(lease, 'lost');
  await once(lease, 'heartbeat');
  await daemon.advance(5000);
  const [err] = await lost;
  assert.ok(err instanceof LeaseLostError);
  assert.equal(err.kind, 'lease_lost');
  assert.ok(err.cause instanceof LeaseInvalidError);
  assert.equal(lease.signal.reason, err);
  assert.throws(() => lease.check(), LeaseLostError);
  await assert.rejects(lease.release(), LeaseLostError);
});

test('a held lock refuses others with LockBusyError naming the holder; wait_ms waits its turn', async () => {
  const held = await c.lock('dir:src', { owner: 'editor', ttl_secs: 30, heartbeat_ms: 0 });
  const busy = await c.lock('file:src/lib.rs', { owner: 'other' }).catch((e) => e);
  assert.ok(busy instanceof LockBusyError, String(busy));
  assert.equal(busy.heldBy.owner, 'editor');
  assert.equal(busy.data.conflicting_key, 'dir:src');
  assert.match(busy.message, /held by editor .* \(via dir:src\); wait \(wait_ms\) or try later/);

  // A waiting acquire goes on a connection of its own: this client's other calls go on.
  const waiting = c.lock('file:src/lib.rs', { owner: 'other', wait_ms: 60_000, heartbeat_ms: 0 });
  assert.equal((await c.get('nothing', 'here')), null);
  await held.release('modified');
  const next = await waiting;
  assert.equal(next.owner, 'other');
  await next.release();

  const listed = await c.listLocks({ owner: 'nobody' });
  assert.deepEqual(listed, []);
});

test('withLock releases with the outcome set, or as abandoned when fn throws', async () => {
  const value = await c.withLock('file:a.md', async (lease) => {
    const [entry] = await c.listLocks({ prefix: 'file:a.md' });
    assert.equal(entry.owner, lease.owner);
    lease.outcome = 'created';
    return 42;
  }, { heartbeat_ms: 0 });
  assert.equal(value, 42);
  assert.equal((await c.lockStatus('file:a.md')).previous.outcome, 'created');

  await assert.rejects(
    c.withLock('file:a.md', async () => {
      throw new Error('the model call failed');
    }),
    /the model call failed/,
  );
  const previous = (await c.lockStatus('file:a.md')).previous;
  assert.equal(previous.outcome, 'abandoned');
  assert.equal(previous.note, 'Error: the model call failed');
});

test('Symbol.asyncDispose (what `await using` calls) releases the lease', async () => {
  // Node 20's JavaScript has no `await using` yet (TypeScript compiles it to this call).
  const lease = await c.lock('tool:cargo', { mode: 'shared', ttl_secs: 30 });
  lease.outcome = 'modified';
  assert.equal((await c.lockStatus('tool:cargo')).status, 'held');
  await lease[Symbol.asyncDispose]();
  const status = await c.lockStatus('tool:cargo');
  assert.equal(status.status, 'available');
  assert.equal(status.previous.outcome, 'modified');
});

test('waitLock waits without taking the key', async () => {
  const lease = await c.lock('file:w.md', { ttl_secs: 30, heartbeat_ms: 0 });
  const waiting = c.waitLock('file:w.md', 60_000);
  await lease.release('deleted');
  const answer = await waiting;
  assert.equal(answer.status, 'available');
  assert.equal(answer.previous.outcome, 'deleted');
});
