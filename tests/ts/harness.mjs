// Shared by the TypeScript-SDK tests: a real batond on a temporary BATON_HOME (as
// tests/batonproc.py starts it) and mcp-bridge sessions driven by the official SDK's
// Client over StdioClientTransport, the way MCP hosts built on that SDK run it.

import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '..', '..', '..');
export const BIN_DIR = process.env.BATON_BIN_DIR ?? join(ROOT, 'target', 'debug');

/** One request on a fresh connection to batond; resolves to the whole answer. */
export function rawCall(socket, method, params = {}) {
  return new Promise((resolvePromise, reject) => {
    const conn = createConnection(socket);
    let buffer = '';
    conn.setEncoding('utf8');
    conn.on('error', reject);
    conn.on('connect', () => conn.write(JSON.stringify({ id: 1, method, params }) + '\n'));
    conn.on('data', (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf('\n');
      if (end >= 0) {
        conn.end();
        try {
          resolvePromise(JSON.parse(buffer.slice(0, end)));
        } catch (err) {
          reject(err);
        }
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

/** Runs one statement on the test server's own database, with psql. */
function postgres(sql) {
  execFileSync('psql', ['-q', '-v', 'ON_ERROR_STOP=1', serverUrl(), '-c', sql], { stdio: 'pipe' });
}

/** A batond process on a temporary BATON_HOME; `env` adds settings (BATON_MAX_VALUE_BYTES...). */
export class Daemon {
  static async start(env = {}) {
    const home = mkdtempSync(join(tmpdir(), 'baton-ts-'));
    const daemon = new Daemon(home, env);
    await daemon.ready();
    return daemon;
  }

  constructor(home, env) {
    this.home = home;
    this.socket = join(home, 'baton.sock');
    this.logPath = join(home, 'batond.log');
    const log = openSync(this.logPath, 'w');
    const settings = { ...process.env, RUST_LOG: 'warn', BATON_ENV_FILE: join(home, 'absent.env'), ...env };
    delete settings.BATON_DATABASE_URL;
    // With BATON_TEST_BACKEND=postgres, each daemon gets a fresh database on the server at
    // BATON_TEST_POSTGRES_URL (scripts/test finds or starts one); dropped by remove().
    if (process.env.BATON_TEST_BACKEND === 'postgres') {
      this.database = `baton_ts_${randomUUID().replaceAll('-', '')}`;
      postgres(`CREATE DATABASE ${this.database}`);
      const server = serverUrl();
      settings.BATON_DATABASE_URL = server.slice(0, server.lastIndexOf('/') + 1) + this.database;
    }
    this.proc = spawn(join(BIN_DIR, 'batond'), ['--home', home], {
      stdio: ['ignore', log, log],
      env: settings,
    });
    closeSync(log);
    this.exited = once(this.proc, 'exit');
  }

  /** Polls Health until batond answers ok (it binds the socket before serving). */
  async ready() {
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

  async call(method, params = {}) {
    const answer = await rawCall(this.socket, method, params);
    if (answer.error) throw new Error(`${method} failed: ${JSON.stringify(answer.error)}`);
    return answer.result;
  }

  /** Stops batond and waits until it has exited. */
  async stop() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      await this.exited;
    }
  }

  async remove() {
    await this.stop();
    rmSync(this.home, { recursive: true, force: true });
    if (this.database) postgres(`DROP DATABASE IF EXISTS ${this.database} WITH (FORCE)`);
  }
}

/**
 * An SDK Client connected to a new mcp-bridge for `socket`. Like the hosts, it lists the
 * tools first, which makes the SDK check every later structuredContent against the
 * tool's outputSchema.
 */
export async function connect(socket, ...args) {
  const transport = new StdioClientTransport({
    command: join(BIN_DIR, 'mcp-bridge'),
    args: ['--socket', socket, ...args],
    env: { PATH: process.env.PATH ?? '', RUST_LOG: 'warn' },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'baton-ts-test', version: '1.0.0' });
  await client.connect(transport);
  const { tools } = await client.listTools();
  client.baton = { tools: Object.fromEntries(tools.map((t) => [t.name, t])) };
  return client;
}

/** The text blocks of a tool result, joined. */
export function text(result) {
  return (result.content ?? [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}
