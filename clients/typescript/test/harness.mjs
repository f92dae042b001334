// A real batond for the client's tests, on a temporary BATON_HOME (as tests/ts/harness.mjs
// and tests/batonproc.py start it). With BATON_TEST_BACKEND=postgres each daemon gets a
// database of its own on BATON_TEST_POSTGRES_URL (made and dropped with psql).
// `clock: true` starts it on the test clock (BATON_TEST_CLOCK_MS=0): time moves only by
// `advance(ms)`, so expiry is tested without sleeping.

import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

// The tests say where batond is; a developer's own settings must not change that.
for (const name of ['BATON_URL', 'BATON_TOKEN', 'BATON_TLS_CA', 'BATON_TLS_CLIENT_CERT', 'BATON_TLS_CLIENT_KEY', 'BATON_SOCKET_PATH', 'BATON_HOME']) {
  delete process.env[name];
}

export const PACKAGE = resolve(fileURLToPath(import.meta.url), '..', '..');
export const ROOT = resolve(PACKAGE, '..', '..');
export const BIN_DIR = process.env.BATON_BIN_DIR ?? join(ROOT, 'target', 'debug');

/** One request on a fresh connection; resolves to the whole answer line, parsed. */
export function rawCall(socket, method, params = {}) {
  return new Promise((resolveAnswer, reject) => {
    const conn = createConnection(socket);
    let buffer = '';
    conn.setEncoding('utf8');
    conn.on('error', reject);
    conn.on('connect', () => conn.write(`${JSON.stringify({ id: 1, method, params })}\n`));
    conn.on('data', (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf('\n');
      if (end < 0) return;
      conn.end();
      try {
        resolveAnswer(JSON.parse(buffer.slice(0, end)));
      } catch (err) {
        reject(err);
      }
    });
  });
}

function serverUrl() {
  const url = process.env.BATON_TEST_POSTGRES_URL;
  if (!url || url === 'none') {
    throw new Error('BATON_TEST_BACKEND=postgres needs BATON_TEST_POSTGRES_URL (scripts/test sets it)');
  }
  return url;
}

function postgres(sql) {
  execFileSync('psql', ['-q', '-v', 'ON_ERROR_STOP=1', serverUrl(), '-c', sql], { stdio: 'pipe' });
}

/** A free TCP port on loopback. */
export async function freePort() {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

export class Daemon {
  /** `env`: extra settings; `args`: extra flags; `clock`: run on the test clock. */
  static async start({ env = {}, args = [], clock = false } = {}) {
    const daemon = new Daemon({ env: clock ? { BATON_TEST_CLOCK_MS: '0', ...env } : env, args });
    await daemon.launch();
    return daemon;
  }

  constructor({ env, args }) {
    this.home = mkdtempSync(join(tmpdir(), 'baton-tsclient-'));
    this.socket = join(this.home, 'baton.sock');
    this.logPath = join(this.home, 'batond.log');
    this.args = args;
    this.settings = { ...process.env, RUST_LOG: 'warn', BATON_ENV_FILE: join(this.home, 'absent.env'), ...env };
    delete this.settings.BATON_DATABASE_URL;
    delete this.settings.BATON_URL;
    delete this.settings.BATON_TOKEN;
    if (process.env.BATON_TEST_BACKEND === 'postgres') {
      this.database = `baton_tsclient_${randomUUID().replaceAll('-', '')}`;
      postgres(`CREATE DATABASE ${this.database}`);
      const server = serverUrl();
      this.settings.BATON_DATABASE_URL = server.slice(0, server.lastIndexOf('/') + 1) + this.database;
    }
  }

  /** Starts batond (again, on the same home and database) and waits until it serves. */
  async launch() {
    const log = openSync(this.logPath, 'a');
    this.proc = spawn(join(BIN_DIR, 'batond'), ['--home', this.home, ...this.args], {
      stdio: ['ignore', log, log],
      env: this.settings,
    });
    closeSync(log);
    this.exited = once(this.proc, 'exit');
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        const answer = await rawCall(this.socket, 'Health');
        if (answer.result?.status === 'ok') return;
      } catch {
        // not listening yet
      }
      if (this.proc.exitCode !== null || Date.now() > deadline) {
        throw new Error(`batond did not start: ${readFileSync(this.logPath, 'utf8')}`);
      }
      await delay(10);
    }
  }

  /** One call on a fresh connection: its result, or throws with the error answer. */
  async call(method, params = {}) {
    const answer = await rawCall(this.socket, method, params);
    if (answer.error) throw new Error(`${method} failed: ${JSON.stringify(answer.error)}`);
    return answer.result;
  }

  /** Moves the test clock (a daemon started with `clock: true`). */
  advance(ms) {
    return this.call('AdvanceClock', { ms });
  }

  async stop(signal = 'SIGTERM') {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill(signal);
      await this.exited;
    }
  }

  async restart() {
    await this.stop();
    await this.launch();
  }

  async remove() {
    await this.stop();
    rmSync(this.home, { recursive: true, force: true });
    if (this.database) postgres(`DROP DATABASE IF EXISTS ${this.database} WITH (FORCE)`);
  }
}

function openssl(args, cwd) {
  execFileSync('openssl', args, { cwd, stdio: 'pipe' });
}

/** A CA and a server certificate for localhost and 127.0.0.1, made with the openssl
 * command line (as tests/python/test_remote.py does): `{dir, ca, cert, key}`. */
export function makeCerts(name = 'Baton test CA') {
  const dir = mkdtempSync(join(tmpdir(), 'baton-tsclient-tls-'));
  makeCa(dir, name);
  openssl(
    ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost'],
    dir,
  );
  writeFileSync(
    join(dir, 'ext.cnf'),
    [
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=serverAuth',
      'subjectKeyIdentifier=hash',
      'authorityKeyIdentifier=keyid,issuer',
      '',
    ].join('\n'),
  );
  openssl(
    ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'ext.cnf'],
    dir,
  );
  return { dir, ca: join(dir, 'ca.pem'), cert: join(dir, 'server.pem'), key: join(dir, 'server.key') };
}

/** ca.pem and ca.key in `dir`. */
export function makeCa(dir, name) {
  mkdirSync(dir, { recursive: true });
  openssl(
    [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem',
      '-days', '2', '-subj', `/CN=${name}`, '-addext', 'basicConstraints=critical,CA:TRUE',
      '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-addext', 'subjectKeyIdentifier=hash',
    ],
    dir,
  );
}

/** Resolves once `predicate()` is true, checking on every event-loop turn (for state that
 * a background heartbeat changes); fails after `ms`. */
export async function until(predicate, what, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(5);
  }
}
