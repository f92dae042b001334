// Every error batond answers arrives as its own class with the daemon's code, kind, data
// and message; the client's own failures (unreachable, connection lost) have theirs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import {
  BatonError,
  Client,
  ConnectionLostError,
  DaemonUnreachableError,
  ERROR_CLASSES,
  fromWire,
  IdempotencyConflictError,
  InvalidError,
  InvalidParamsError,
  LeaseInvalidError,
  MethodNotFoundError,
  NotFoundError,
  ProtocolError,
  RequestTooLargeError,
  UnavailableError,
  ValueTooLargeError,
} from '../src/index.js';
import { Daemon, until } from './harness.mjs';

let daemon;
let c;
before(async () => {
  daemon = await Daemon.start({ env: { BATON_MAX_VALUE_BYTES: '4096' } });
  c = new Client(daemon.socket);
});
after(async () => {
  c?.close();
  await daemon?.remove();
});

const refusal = (promise) => promise.then(
  (value) => assert.fail(`expected an error, got ${JSON.stringify(value)}`),
  (err) => err,
);

test('every kind DescribeInterface lists has a class of its own, carrying code, kind and data', async () => {
  const { errors } = await c.describe();
  assert.ok(errors.length >= 18);
  for (const { code, kind } of errors) {
    const Class = ERROR_CLASSES[kind];
    assert.ok(Class && Class !== BatonError, `no class for kind ${kind}`);
    const err = fromWire({ code, message: `a ${kind}`, data: { kind, extra: 1 } });
    assert.ok(err instanceof Class && err instanceof BatonError && err instanceof Error);
    assert.deepEqual([err.code, err.kind, err.data.extra, err.message, err.name], [code, kind, 1, `a ${kind}`, Class.name]);
  }
  assert.equal(Object.keys(ERROR_CLASSES).length, errors.length);
  // A kind this client does not know yet is still a BatonError with everything in it.
  const unknown = fromWire({ code: 499, message: 'new', data: { kind: 'brand_new' } });
  assert.deepEqual([unknown.constructor, unknown.code, unknown.kind], [BatonError, 499, 'brand_new']);
});

test("batond's refusals, each as its class with the daemon's data", async () => {
  const missing = await refusal(c.call('Set', { namespace: 'e', key: 'k' }));
  assert.ok(missing instanceof InvalidParamsError && missing instanceof ProtocolError);
  assert.deepEqual([missing.code, missing.kind, missing.field], [-32602, 'invalid_params', 'value']);
  assert.match(missing.message, /Set needs `value`/);

  const typo = await refusal(c.set('e', 'k', 1, { expected_verison: 1 }));
  assert.ok(typo instanceof InvalidParamsError);
  assert.equal(typo.field, 'expected_verison');

  const unknown = await refusal(c.call('NoSuchMethod'));
  assert.ok(unknown instanceof MethodNotFoundError);
  assert.ok(unknown.data.methods.includes('Get'));

  const empty = await refusal(c.set('e', '', 1));
  assert.ok(empty instanceof InvalidError);
  assert.equal(empty.code, 400);

  const task = await refusal(c.taskStatus('no-such-task'));
  assert.ok(task instanceof NotFoundError);
  assert.equal(task.code, 404);

  const lease = await refusal(c.releaseLock('file:nobody', 'not-a-lease'));
  assert.ok(lease instanceof LeaseInvalidError);
  assert.equal(lease.code, 410);

  await c.set('e', 'once', 1, { idempotency_key: 'same-key' });
  const reused = await refusal(c.set('e', 'once', 2, { idempotency_key: 'same-key' }));
  assert.ok(reused instanceof IdempotencyConflictError);
  assert.equal(reused.data.idempotency_key, 'same-key');

  const big = await refusal(c.set('e', 'big', 'x'.repeat(5000)));
  assert.ok(big instanceof ValueTooLargeError);
  assert.equal(big.code, 413);
  assert.equal(await c.get('e', 'big'), null);
});

test('a line over the limit is refused (id null) and the pipelined calls around it keep their answers', async () => {
  const before = c.set('e', 'around', 'before');
  const tooLong = c.set('e', 'long', 'x'.repeat(1_100_000));
  const after = c.get('e', 'around');
  const err = await refusal(tooLong);
  assert.ok(err instanceof RequestTooLargeError && err instanceof ProtocolError);
  assert.deepEqual([err.code, err.data.limit], [-32001, 1_048_576]);
  assert.equal((await before).version, 1);
  assert.equal((await after).value, 'before');
});

test('a daemon that is not there: DaemonUnreachableError that says what to do', async () => {
  const nowhere = new Client(join(daemon.home, 'absent.sock'));
  const err = await refusal(nowhere.get('a', 'b'));
  assert.ok(err instanceof DaemonUnreachableError);
  assert.equal(err.kind, 'unreachable');
  assert.match(err.message, /not reachable at .*absent\.sock .*start it with `batond`.*BATON_SOCKET_PATH/);
  assert.equal(err.cause.code, 'ENOENT');
});

test('a daemon killed while a call waits: ConnectionLostError; one stopped: UnavailableError', async () => {
  const own = await Daemon.start();
  try {
    const client = new Client(own.socket);
    await client.registerTask('t', [{ id: 'a', dependencies: [] }, { id: 'b', dependencies: ['a'] }]);
    await client.acquireNode({ owner: 'first' });
    // Nothing else is runnable: this waits, on a connection of its own.
    const waiting = refusal(client.acquireNode({ owner: 'second', wait_ms: 600_000 }));
    await until(async () => (await client.metrics()).node_waiters === 1, 'the worker to wait');
    await own.stop('SIGTERM');
    const stopped = await waiting;
    assert.ok(stopped instanceof UnavailableError, String(stopped));
    assert.equal(stopped.code, 503);
    assert.match(stopped.message, /shutting down; retry AcquireNextNode once it is back/);

    await own.launch();
    await client.health();
    const waitingAgain = refusal(client.acquireNode({ owner: 'third', wait_ms: 600_000 }));
    await until(async () => (await client.metrics()).node_waiters === 1, 'the worker to wait');
    await own.stop('SIGKILL');
    const lost = await waitingAgain;
    assert.ok(lost instanceof ConnectionLostError, String(lost));
    assert.equal(lost.kind, 'connection_lost');
    assert.match(lost.message, /may or may not have taken effect/);
    client.close();
  } finally {
    await own.remove();
  }
});
