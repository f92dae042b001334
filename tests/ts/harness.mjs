// Shared by the TypeScript-SDK tests: a real batond on a temporary BATON_HOME (as
// tests/batonproc.py starts it) and mcp-bridge sessions driven by the official SDK's
// Client over StdioClientTransport, the way MCP hosts built on that SDK run it.

import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

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

/** A connection that stays open (a waiter, a worker, a load), one answer per request;
 * requests may be pipelined. */
export class Line {
  constructor(socket) {
    this.conn = createConnection(socket);
    this.conn.setEncoding('utf8');
    this.buffer = '';
    this.waiting = new Map();
    this.nextId = 1;
    this.conn.on('data', (chunk) => {
      this.buffer += chunk;
      let end;
      while ((end = this.buffer.indexOf('\n')) >= 0) {
        const answer = JSON.parse(this.buffer.slice(0, end));
        this.buffer = this.buffer.slice(end + 1);
        this.waiting.get(answer.id)?.(answer);
        this.waiting.delete(answer.id);
      }
    });
  }

  call(method, params = {}) {
    const id = this.nextId++;
    const answer = new Promise((resolveAnswer) => this.waiting.set(id, resolveAnswer));
    this.conn.write(JSON.stringify({ id, method, params }) + '\n');
    return answer.then((a) => {
      if (a.error) throw new Error(`${method} failed: ${JSON.stringify(a.error)}`);
      return a.result;
    });
  }

  close() {
    this.conn.end();
  }
}

/** The login URL `baton dashboard` prints for `daemon` (a read-only token), or with
 * `args` (e.g. `--operator`) another. */
export async function dashboardUrl(daemon, ...args) {
  const { stdout } = await promisify(execFile)(join(BIN_DIR, 'baton'), ['dashboard', '--no-open', ...args], {
    env: { ...process.env, BATON_SOCKET_PATH: daemon.socket, BATON_ENV_FILE: join(daemon.home, 'absent.env') },
  });
  return stdout.trim();
}

/** Opens the dashboard logged in through `url` in a new page of `browser`, once live. */
export async function openDashboard(browser, url, viewport = { width: 1280, height: 800 }) {
  const page = await browser.newPage({ viewport });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForURL(`${new URL(url).origin}/`);
  await page.getByRole('status').getByText('live').waitFor();
  page.baton = { errors };
  return page;
}

/** The page's JavaScript heap in use after a full garbage collection, in bytes. */
export async function heapAfterGc(page) {
  const cdp = await page.context().newCDPSession(page);
  try {
    await cdp.send('HeapProfiler.collectGarbage');
    const { usedSize } = await cdp.send('Runtime.getHeapUsage');
    return usedSize;
  } finally {
    await cdp.detach();
  }
}

/**
 * Calls `write(i)` `rate` times a second (in ticks of 50 ms, without waiting for the
 * answers: a pipelined load) until `stop()`; resolves to how many it sent.
 */
export function steadyLoad(rate, write) {
  let sent = 0;
  let stopped = false;
  const start = performance.now();
  const failures = [];
  const done = (async () => {
    while (!stopped) {
      const due = Math.floor(((performance.now() - start) / 1000) * rate);
      while (sent < due) {
        const i = sent++;
        Promise.resolve(write(i)).catch((err) => failures.push(err));
      }
      await delay(50);
    }
    if (failures.length) throw failures[0];
    return sent;
  })();
  return { stop: () => { stopped = true; return done; }, sent: () => sent };
}

/**
 * Watches the page for elements with `attr` (a number that only grows: a seq, a fencing
 * token) and remembers when each new highest one appeared, in a bounded ring.
 * `firstSeen(n)` is then when the page first showed `n` or a later one.
 */
export async function track(page, attr) {
  await page.evaluate((attr) => {
    const ring = [];
    let highest = 0;
    const see = (el) => {
      const n = Number(el.getAttribute(attr));
      if (n > highest) {
        highest = n;
        ring.push([n, Date.now()]);
        if (ring.length > 4000) ring.splice(0, 1000);
      }
    };
    new MutationObserver((records) => {
      for (const r of records) {
        for (const node of r.addedNodes) {
          if (node.nodeType !== 1) continue;
          if (node.hasAttribute(attr)) see(node);
          for (const el of node.querySelectorAll(`[${attr}]`)) see(el);
        }
        if (r.type === 'attributes') see(r.target);
      }
    }).observe(document.body, { childList: true, subtree: true, attributes: true, attributeFilter: [attr] });
    window.firstSeen = (n) => ring.find(([m]) => m >= n)?.[1] ?? null;
  }, attr);
}

/** Lags (ms) between each sampled write's answer and the page first showing it. */
export async function lags(page, samples) {
  const seen = await page.evaluate((ns) => ns.map((n) => window.firstSeen(n)), samples.map(([n]) => n));
  return samples.map(([, at], i) => (seen[i] === null ? Infinity : Math.max(0, seen[i] - at)));
}

export const summary = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))];
  return { samples: xs.length, median: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] };
};

