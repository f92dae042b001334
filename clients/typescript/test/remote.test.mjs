// The client over TLS with a token (a CA made here with the openssl command line, as
// tests/python/test_remote.py does), where it finds batond from the environment, and the
// URLs it refuses.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

import {
  Client,
  DaemonUnreachableError,
  Endpoint,
  ForbiddenError,
  resolveEndpoint,
  socketPath,
  UnauthenticatedError,
} from '../src/index.js';
import { Daemon, freePort, makeCa, makeCerts } from './harness.mjs';

let daemon;
let certs;
let url;
before(async () => {
  certs = makeCerts();
  const port = await freePort();
  daemon = await Daemon.start({ args: ['--listen', `tls://127.0.0.1:${port}`, '--tls-cert', certs.cert, '--tls-key', certs.key] });
  url = `tls://localhost:${port}`;
});
after(async () => {
  await daemon?.remove();
  if (certs) rmSync(certs.dir, { recursive: true, force: true });
});

/** Runs `fn` with these environment variables set (undefined: unset), then restores them. */
async function withEnv(vars, fn) {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (k, v) => (v === undefined ? delete process.env[k] : (process.env[k] = v));
  for (const [k, v] of Object.entries(vars)) set(k, v);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) set(k, v);
  }
}

const token = async (...scopes) => (await daemon.call('CreateToken', { name: 'ts-agent', scopes })).token;

test('over TLS with a token: state, locks, pipelining, a subscription; a grant it lacks is 403', async () => {
  const secret = await token('kv:write:ts-tls', 'locks:tool:*', 'events:read');
  const c = new Client({ url, token: secret, tlsCa: certs.ca });
  assert.equal((await c.set('ts-tls', 'k', { n: 1 }, { expected_version: 0 })).version, 1);
  assert.deepEqual((await c.get('ts-tls', 'k')).value, { n: 1 });
  assert.equal((await c.update('ts-tls', 'k', (v) => ({ n: v.n + 1 }))).version, 2);
  const many = await Promise.all(Array.from({ length: 50 }, (_, i) => c.set('ts-tls', `p${i}`, i)));
  assert.deepEqual(new Set(many.map((r) => r.version)), new Set([1]));
  await c.withLock('tool:ts-tls', (lease) => assert.ok(lease.fencing_token >= 1), { ttl_secs: 30 });
  const denied = await c.get('elsewhere', 'k').catch((e) => e);
  assert.ok(denied instanceof ForbiddenError, String(denied));
  assert.deepEqual([denied.code, denied.needed], [403, 'kv:read:elsewhere']);
  const sub = await c.subscribe({ namespace: 'ts-tls' }, { since_seq: 0 });
  const event = await sub.next();
  assert.equal(event.namespace, 'ts-tls');
  sub.close();
  c.close();
});

test('BATON_URL, BATON_TOKEN and BATON_TLS_CA from the environment', async () => {
  const secret = await token('kv:read:*');
  await withEnv({ BATON_URL: url, BATON_TOKEN: secret, BATON_TLS_CA: certs.ca }, async () => {
    const c = new Client();
    assert.equal(c.socketPath, url);
    assert.equal((await c.get('ts-tls', 'k')).version, 2);
    c.close();
  });
});

test('a wrong token is 401 (and never echoed); no token is 401 at the first call that needs one', async () => {
  const wrong = new Client({ url, token: 'baton_wrong', tlsCa: certs.ca });
  const refused = await wrong.get('a', 'b').catch((e) => e);
  assert.ok(refused instanceof UnauthenticatedError, String(refused));
  assert.equal(refused.code, 401);
  assert.ok(!refused.message.includes('baton_wrong'));
  await withEnv({ BATON_TOKEN: undefined }, async () => {
    const anonymous = new Client({ url, tlsCa: certs.ca });
    assert.equal((await anonymous.health()).status, 'ok');
    assert.ok((await anonymous.get('a', 'b').catch((e) => e)) instanceof UnauthenticatedError);
    anonymous.close();
  });
});

test("a certificate from a CA the client does not trust: DaemonUnreachableError naming BATON_TLS_CA", async () => {
  const other = join(certs.dir, 'other');
  makeCa(other, "Someone else's CA");
  const c = new Client({ url, token: await token('kv:read:*'), tlsCa: join(other, 'ca.pem') });
  const err = await c.get('a', 'b').catch((e) => e);
  assert.ok(err instanceof DaemonUnreachableError, String(err));
  assert.match(err.message, /BATON_TLS_CA/);
  const noFile = new Client({ url, tlsCa: join(other, 'missing.pem') });
  const unread = await noFile.health().catch((e) => e);
  assert.ok(unread instanceof DaemonUnreachableError);
  assert.match(unread.message, /cannot read a TLS file/);
});

test('where the client looks for batond, as the Python client does', async () => {
  await withEnv({ BATON_URL: undefined, BATON_SOCKET_PATH: undefined, BATON_HOME: undefined }, async () => {
    assert.equal(socketPath(), join(homedir(), '.baton', 'baton.sock'));
    await withEnv({ BATON_HOME: '/srv/baton' }, () => assert.equal(socketPath(), '/srv/baton/baton.sock'));
    await withEnv({ BATON_HOME: '/srv/baton', BATON_SOCKET_PATH: '/run/b.sock' }, () => {
      assert.equal(new Client().socketPath, '/run/b.sock');
      // An explicit socket wins over BATON_URL; a URL over both.
      return withEnv({ BATON_URL: 'tls://coord.example:7420' }, () => {
        assert.equal(new Client().socketPath, 'tls://coord.example:7420');
        assert.equal(new Client('/tmp/x.sock').socketPath, '/tmp/x.sock');
        assert.equal(new Client({ url: 'unix:///tmp/y.sock' }).socketPath, '/tmp/y.sock');
      });
    });
  });
  const v6 = resolveEndpoint('tcp://[::1]:7420');
  assert.deepEqual([v6.scheme, v6.host, v6.port, String(v6)], ['tcp', '::1', 7420, 'tcp://[::1]:7420']);
  const secret = new Endpoint({ scheme: 'tls', host: 'h', port: 1, token: 'baton_secret' });
  assert.ok(!JSON.stringify(secret).includes('baton_secret'));
  for (const bad of ['http://x:1', 'tls://nohost', 'unix://relative/path', 'tcp://:7', 'tls://h:99999', 'nothing']) {
    assert.throws(() => new Client({ url: bad }), (err) => err instanceof TypeError && /is not a batond URL; write unix:\/\/\//.test(err.message), bad);
  }
});
