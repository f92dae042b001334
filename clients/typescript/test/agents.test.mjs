// Agents through the client: sessions kept alive by heartbeats on the test clock, one
// live session per name, messages to names and to everyone, the inbox as an async
// iterator, acknowledgements and the unread counts others see.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';

import { Client, ConflictError, LeaseInvalidError, LeaseLostError } from '../src/index.js';
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

test('agents message each other; the inbox yields what arrives; ack moves the unread count', async () => {
  const writer = await c.register('writer', { role: 'writes', heartbeat_ms: 0 });
  const reviewer = await c.register('reviewer', { role: 'reviews', metadata: { model: 'stand-in' }, heartbeat_ms: 0 });
  const names = (await c.listAgents()).map((a) => a.name).sort();
  assert.deepEqual(names, ['reviewer', 'writer']);

  const inbox = c.inbox(reviewer, { wait_ms: 60_000 });
  const first = inbox.next(); // waits on a connection of its own
  const sent = await c.send(writer, 'reviewer', { draft: 'v1' }, { subject: 'please review', thread_id: 't1' });
  const { value: message } = await first;
  assert.deepEqual([message.from, message.subject, message.body, message.seq], ['writer', 'please review', { draft: 'v1' }, sent.seq]);

  const reply = await c.send(reviewer, ['writer'], { verdict: 'ok' }, { reply_to: message.message_id, thread_id: 't1' });
  const read = await c.readInbox(writer);
  assert.deepEqual(read.messages.map((m) => [m.body, m.reply_to]), [[{ verdict: 'ok' }, message.message_id]]);
  assert.equal(read.next_after, reply.seq);

  const broadcast = await c.send(writer, '*', 'standup in 5');
  const { value: toAll } = await inbox.next();
  assert.deepEqual([toAll.body, toAll.seq], ['standup in 5', broadcast.seq]);
  await inbox.return();

  const before = (await c.listAgents()).find((a) => a.name === 'reviewer');
  assert.equal(before.unread, 2);
  const acked = await c.ack(reviewer, toAll.seq);
  assert.equal(acked.unread, 0);
  assert.equal((await c.listAgents()).find((a) => a.name === 'reviewer').unread, 0);

  await writer.end();
  await reviewer.end();
  assert.deepEqual(await c.listAgents(), []);
});

test('a name has one live session; takeover ends the other, whose heartbeat then finds it lost', async () => {
  const first = await c.register('solo', { ttl_secs: 30, heartbeat_ms: 20 });
  const twice = await c.register('solo').catch((e) => e);
  assert.ok(twice instanceof ConflictError, String(twice));
  assert.equal(twice.code, 409);
  const lost = once(first, 'lost');
  const second = await c.register('solo', { takeover: true, heartbeat_ms: 0 });
  const [err] = await lost;
  assert.ok(err instanceof LeaseLostError);
  assert.throws(() => first.check(), /session of agent solo has ended/);
  assert.equal(await first.end(), null);
  await second.end();
});

test('heartbeats keep a session past its TTL on the test clock; without them it ends', async () => {
  const kept = await c.register('kept', { ttl_secs: 2, heartbeat_ms: 20 });
  const dropped = await c.register('dropped', { ttl_secs: 2, heartbeat_ms: 0 });
  for (let i = 0; i < 4; i++) {
    await once(kept, 'heartbeat');
    await daemon.advance(1500);
  }
  const live = (await c.listAgents()).map((a) => a.name);
  assert.deepEqual(live, ['kept']);
  assert.equal(kept.lost, false);
  const gone = await c.send(dropped, 'kept', 'hello?').catch((e) => e);
  assert.ok(gone instanceof LeaseInvalidError, String(gone));
  assert.equal(gone.code, 410);
  await kept.end();
});

test('withAgent ends the session when fn settles', async () => {
  const value = await c.withAgent('helper', async (agent) => {
    assert.ok(agent.session_id);
    assert.deepEqual((await c.listAgents()).map((a) => a.name), ['helper']);
    return 'done';
  }, { heartbeat_ms: 0 });
  assert.equal(value, 'done');
  assert.deepEqual(await c.listAgents(), []);
});
