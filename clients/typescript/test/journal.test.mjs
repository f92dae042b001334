// The journal through the client: readEvents and publish, and subscribe as an async
// iterator: stored events then live ones with no gap and no duplicate, resumed when batond
// cuts a slow reader off and when batond restarts.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Client, CompactedError } from '../src/index.js';
import { Daemon } from './harness.mjs';

let daemon;
let c;
before(async () => {
  daemon = await Daemon.start();
  c = new Client(daemon.socket);
});
after(async () => {
  c?.close();
  await daemon?.remove();
});

/** The next `n` events of `sub`. */
async function take(sub, n) {
  const events = [];
  while (events.length < n) events.push(await sub.next());
  return events;
}

test('publish and readEvents with a filter', async () => {
  const seq = await c.publish('deploy', { version: '1.2.3' }, { actor: 'ci' });
  await c.set('re', 'a', 1);
  const { events, next_seq } = await c.readEvents(seq - 1, { types: ['custom.*'] });
  assert.equal(events[0].seq, seq);
  assert.deepEqual([events[0].type, events[0].actor, events[0].data], ['custom.deploy', 'ci', { version: '1.2.3' }]);
  assert.ok(next_seq >= seq);
  const kv = await c.readEvents(0, { namespace: 're', limit: 10 });
  assert.deepEqual(kv.events.map((e) => [e.type, e.key]), [['kv.set', 'a']]);
});

test('subscribe replays stored events, then live ones, in order and once each', async () => {
  for (let i = 0; i < 5; i++) await c.set('sub', `k${i}`, i);
  const sub = await c.subscribe({ namespace: 'sub' }, { since_seq: 0 });
  const replayed = await take(sub, 5);
  assert.deepEqual(replayed.map((e) => e.key), ['k0', 'k1', 'k2', 'k3', 'k4']);
  const writes = [];
  for (let i = 5; i < 10; i++) writes.push(c.set('sub', `k${i}`, i));
  await Promise.all(writes);
  const live = await take(sub, 5);
  const seqs = [...replayed, ...live].map((e) => e.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
  assert.equal(new Set(seqs).size, 10);
  assert.deepEqual(live.map((e) => e.key), ['k5', 'k6', 'k7', 'k8', 'k9']);
  assert.equal(sub.last_seq, live[4].seq);
  sub.close();
});

test('for await ends when the subscription is closed', async () => {
  const sub = await c.subscribe({ types: ['custom.tick'] });
  const seen = [];
  const loop = (async () => {
    for await (const event of sub) {
      seen.push(event.data.n);
      if (seen.length === 3) sub.close();
    }
  })();
  for (let n = 1; n <= 3; n++) await c.publish('tick', { n });
  await loop;
  assert.deepEqual(seen, [1, 2, 3]);
});

test('a reader that falls behind is cut off by batond and resumes where it was, missing nothing', async () => {
  const sub = await c.subscribe({ types: ['custom.flood'] });
  // Two events read one at a time: batond's side of the subscription has caught up with
  // the journal and sends live events as they come (before that it replays at the
  // reader's pace, and a slow reader is never cut off).
  for (const i of [-2, -1]) {
    const seq = await c.publish('flood', { i });
    assert.equal((await sub.next()).seq, seq);
  }
  const padding = 'x'.repeat(1000);
  // Written while nobody reads the subscription: past the client's read-ahead the socket
  // is paused, batond's queue for it fills, and batond ends it (overflow).
  const seqs = await Promise.all(Array.from({ length: 6000 }, (_, i) => c.publish('flood', { i, padding })));
  const events = await take(sub, seqs.length);
  assert.deepEqual(events.map((e) => e.seq), seqs);
  assert.deepEqual(events.map((e) => e.data.i), seqs.map((_, i) => i));
  assert.ok(sub.resumes >= 1, 'batond did not cut the slow reader off: the test proves nothing');
  sub.close();
});

test('after batond restarts, the subscription reconnects and carries on from its last event', async () => {
  for (let i = 0; i < 3; i++) await c.set('restart', `k${i}`, i);
  const sub = await c.subscribe({ namespace: 'restart' }, { since_seq: 0 });
  const before = await take(sub, 2);
  await daemon.restart();
  for (let i = 3; i < 6; i++) await c.set('restart', `k${i}`, i);
  const afterRestart = await take(sub, 4);
  assert.deepEqual([...before, ...afterRestart].map((e) => e.key), ['k0', 'k1', 'k2', 'k3', 'k4', 'k5']);
  assert.ok(sub.resumes >= 1);
  sub.close();
});

test('reads and subscriptions from before a compaction are refused with CompactedError', async () => {
  await c.set('compact', 'k', 1);
  const head = (await c.readEvents(0, { limit: 1000 })).next_seq;
  const compacted = await c.call('CompactJournal', { before_seq: head });
  assert.equal(compacted.oldest_seq, head);
  const read = await c.readEvents(0).catch((e) => e);
  assert.ok(read instanceof CompactedError, String(read));
  assert.deepEqual([read.code, read.kind, read.oldestSeq], [416, 'compacted', head]);
  const sub = await c.subscribe(null, { since_seq: 0 }).catch((e) => e);
  assert.ok(sub instanceof CompactedError);
});
