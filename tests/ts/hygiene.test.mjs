// Protocol hygiene of mcp-bridge as a host sees it on the wire, byte for byte: every
// fault of the client's is answered with a JSON-RPC error the client can match to what it
// sent, and the bridge ends at once and cleanly when its client goes away.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { BIN_DIR, Daemon } from './harness.mjs';

let daemon;
before(async () => {
  daemon = await Daemon.start();
});
after(async () => {
  await daemon?.remove();
});

/**
 * A bridge driven line by line, as a host's transport drives it. No HOME in its
 * environment, as some hosts start servers: --socket is all the bridge needs.
 */
function rawBridge(...args) {
  const proc = spawn(join(BIN_DIR, 'mcp-bridge'), ['--socket', daemon.socket, ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', RUST_LOG: 'warn' },
  });
  let stderr = '';
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = once(proc, 'exit');
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  return {
    proc,
    exited,
    stderr: () => stderr,
    send(message) {
      proc.stdin.write((typeof message === 'string' ? message : JSON.stringify(message)) + '\n');
    },
    async answer() {
      const { value, done } = await lines.next();
      assert.ok(!done, `the bridge ended its output; stderr: ${stderr}`);
      return JSON.parse(value);
    },
  };
}

async function initialized(bridge) {
  bridge.send({
    jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw-ts', version: '1' } },
  });
  assert.equal((await bridge.answer()).id, 1);
  bridge.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
}

test('a line that is not JSON is answered -32700 and the session goes on', async () => {
  const bridge = rawBridge();
  await initialized(bridge);
  bridge.send('{this is not json');
  const parse = await bridge.answer();
  assert.equal(parse.id, null);
  assert.equal(parse.error.code, -32700, JSON.stringify(parse));
  bridge.send({ jsonrpc: '2.0', id: 2, method: 'ping' });
  assert.deepEqual(await bridge.answer(), { jsonrpc: '2.0', id: 2, result: {} });
  bridge.proc.stdin.end();
  const [code] = await bridge.exited;
  assert.equal(code, 0);
  assert.match(bridge.stderr(), /not JSON/);
});

test('an id the bridge cannot use is answered -32600 with that same id', async () => {
  const bridge = rawBridge();
  await initialized(bridge);
  for (const id of [{ a: 1 }, [1], 1.5, true, null]) {
    bridge.send({ jsonrpc: '2.0', id, method: 'tools/list' });
    const refused = await bridge.answer();
    assert.deepEqual(refused.id, id);
    assert.equal(refused.error.code, -32600, JSON.stringify(refused));
    assert.match(refused.error.message, /string or an integer/);
  }
  // An integer too large for the bridge comes back digit for digit, so the host can match it.
  bridge.send('{"jsonrpc":"2.0","id":9223372036854775808,"method":"ping"}');
  const big = await bridge.answer();
  assert.equal(big.error.code, -32600);
  bridge.proc.stdin.end();
  await bridge.exited;
});

test('tools/call without a name and tools/list with a bad cursor are -32602', async () => {
  const bridge = rawBridge();
  await initialized(bridge);
  bridge.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { arguments: {} } });
  const nameless = await bridge.answer();
  assert.equal(nameless.id, 2);
  assert.equal(nameless.error.code, -32602);
  assert.match(nameless.error.message, /baton_get/);
  bridge.send({ jsonrpc: '2.0', id: 3, method: 'tools/list', params: { cursor: 'bogus' } });
  const cursor = await bridge.answer();
  assert.equal(cursor.id, 3);
  assert.equal(cursor.error.code, -32602);
  bridge.proc.stdin.end();
  await bridge.exited;
});

test('closing stdin before initialize exits 0 with nothing on stdout', async () => {
  const bridge = rawBridge();
  let stdout = '';
  bridge.proc.stdout.on('data', (chunk) => (stdout += chunk));
  bridge.proc.stdin.end();
  const [code] = await bridge.exited;
  assert.equal(code, 0, bridge.stderr());
  assert.equal(stdout, '');
});

test('a call waiting in the daemon does not hold the exit when the client leaves', async () => {
  await daemon.call('AcquireResourceLock', { resource_key: 'tool:ts-held', owner: 'other' });
  const bridge = rawBridge();
  await initialized(bridge);
  bridge.send({
    jsonrpc: '2.0', id: 2, method: 'tools/call',
    params: { name: 'baton_claim', arguments: { resource_key: 'tool:ts-held', wait_ms: 600000 } },
  });
  // The claim is queued once the daemon counts a waiter.
  for (;;) {
    const metrics = await daemon.call('Metrics');
    if (metrics.locks.waiting === 1) break;
    await new Promise((resolve) => setImmediate(resolve));
  }
  bridge.proc.stdin.end();
  const [code] = await bridge.exited;
  assert.equal(code, 0, bridge.stderr());
  // The waiter left with the bridge: nothing waits in the daemon any more.
  for (;;) {
    const metrics = await daemon.call('Metrics');
    if (metrics.locks.waiting === 0) break;
    await new Promise((resolve) => setImmediate(resolve));
  }
});
