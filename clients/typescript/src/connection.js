// Where batond is (a Unix socket or a URL), who we are (a token), and one connection:
// requests written as they come (pipelined), answers read in order.

import { EventEmitter, once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createConnection, isIP } from 'node:net';
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';

import { BatonError, ConnectionLostError, DaemonUnreachableError, fromWire } from './errors.js';

/** The daemon's socket: `explicit`, else BATON_SOCKET_PATH, else $BATON_HOME/baton.sock,
 * else ~/.baton/baton.sock. */
export function socketPath(explicit) {
  if (explicit) return String(explicit);
  if (process.env.BATON_SOCKET_PATH) return process.env.BATON_SOCKET_PATH;
  const home = process.env.BATON_HOME || join(homedir(), '.baton');
  return join(home, 'baton.sock');
}

/** BATON_OWNER, else host:pid (unique per process, readable in ListResourceLocks). */
export function defaultOwner() {
  return process.env.BATON_OWNER || `${hostname()}:${process.pid}`;
}

/** Where batond is and how to reach it: a Unix socket, `tcp://HOST:PORT` (loopback only)
 * or `tls://HOST:PORT`, with the token to authenticate with right after connecting. TLS
 * checks batond's certificate against Node's roots, or the CA in `tlsCa`. */
export class Endpoint {
  constructor({ scheme = 'unix', path = '', host = '', port = 0, token, tlsCa, clientCert, clientKey } = {}) {
    this.scheme = scheme;
    this.path = path;
    this.host = host;
    this.port = port;
    this.tlsCa = tlsCa || undefined;
    this.clientCert = clientCert || undefined;
    this.clientKey = clientKey || undefined;
    // Not enumerable: never printed with the endpoint.
    Object.defineProperty(this, 'token', { value: token || undefined, enumerable: false });
  }

  /** Reads unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT. */
  static parse(url, extra = {}) {
    const bad = () =>
      new TypeError(`\`${url}\` is not a batond URL; write unix:///path/to/baton.sock, tls://HOST:PORT or tcp://127.0.0.1:PORT`);
    const at = url.indexOf('://');
    if (at < 0) throw bad();
    const scheme = url.slice(0, at);
    const rest = url.slice(at + 3);
    if (scheme === 'unix') {
      if (!rest.startsWith('/')) throw bad();
      return new Endpoint({ ...extra, scheme, path: rest });
    }
    if (scheme !== 'tcp' && scheme !== 'tls') throw bad();
    const trimmed = rest.replace(/\/+$/, '');
    const colon = trimmed.lastIndexOf(':');
    const host = colon > 0 ? trimmed.slice(0, colon).replace(/^\[|\]$/g, '') : '';
    const port = colon > 0 ? trimmed.slice(colon + 1) : '';
    if (!host || !/^[0-9]+$/.test(port) || Number(port) > 65535) throw bad();
    return new Endpoint({ ...extra, scheme, host, port: Number(port) });
  }

  toString() {
    if (this.scheme === 'unix') return this.path;
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `${this.scheme}://${host}:${this.port}`;
  }

  [Symbol.for('nodejs.util.inspect.custom')]() {
    return `Endpoint(${this.toString()}, token ${this.token ? 'set' : 'unset'})`;
  }

  unreachable(err) {
    const why = err?.code ? `${err.code}: ${err.message}` : String(err?.message ?? err);
    if (this.scheme !== 'unix') {
      return new DaemonUnreachableError(
        `batond is not reachable at ${this} (${why}); check that it listens there (BATON_LISTEN), the URL (BATON_URL), and that BATON_TLS_CA names the CA of its certificate`,
        { kind: 'unreachable' },
        { cause: err },
      );
    }
    return new DaemonUnreachableError(
      `batond is not reachable at ${this.path} (${why}); start it with \`batond\` (or \`baton service\`), or point BATON_SOCKET_PATH at its socket`,
      { kind: 'unreachable' },
      { cause: err },
    );
  }

  /** A connected (and, with a token, authenticated) Connection. */
  async open() {
    let socket;
    try {
      socket = await this.#socket();
    } catch (err) {
      throw err instanceof BatonError ? err : this.unreachable(err);
    }
    const conn = new Connection(socket, this);
    if (this.token) {
      try {
        await conn.send('Authenticate', { token: this.token });
      } catch (err) {
        conn.close();
        if (err instanceof ConnectionLostError) throw this.unreachable(err);
        throw err;
      }
    }
    return conn;
  }

  async #socket() {
    if (this.scheme === 'unix') {
      const socket = createConnection(this.path);
      await settle(socket, 'connect');
      return socket;
    }
    if (this.scheme === 'tcp') {
      const socket = createConnection({ host: this.host, port: this.port });
      await settle(socket, 'connect');
      socket.setNoDelay(true);
      return socket;
    }
    let options;
    try {
      options = {
        host: this.host,
        port: this.port,
        ca: this.tlsCa ? readFileSync(this.tlsCa) : undefined,
        cert: this.clientCert ? readFileSync(this.clientCert) : undefined,
        key: this.clientKey ? readFileSync(this.clientKey) : undefined,
      };
    } catch (err) {
      throw new DaemonUnreachableError(
        `cannot read a TLS file for ${this} (${err.message}); check BATON_TLS_CA, BATON_TLS_CLIENT_CERT and BATON_TLS_CLIENT_KEY`,
        { kind: 'unreachable' },
        { cause: err },
      );
    }
    if (!isIP(this.host)) options.servername = this.host;
    const socket = tlsConnect(options);
    await settle(socket, 'secureConnect');
    socket.setNoDelay(true);
    return socket;
  }
}

async function settle(socket, event) {
  try {
    await once(socket, event);
  } catch (err) {
    socket.destroy();
    throw err;
  }
}

/** Where to connect, as the Python client decides it: `url`, else `socketPath`, else
 * BATON_URL, else the local socket (BATON_SOCKET_PATH, $BATON_HOME/baton.sock,
 * ~/.baton/baton.sock); the token from `token`, else BATON_TOKEN; TLS files from the
 * options, else BATON_TLS_CA, BATON_TLS_CLIENT_CERT and BATON_TLS_CLIENT_KEY. A string
 * is a URL when it has `://`, else a socket path. */
export function resolveEndpoint(target) {
  if (target instanceof Endpoint) return target;
  const options = typeof target === 'string' ? (target.includes('://') ? { url: target } : { socketPath: target }) : { ...(target ?? {}) };
  const env = process.env;
  const extra = {
    token: options.token ?? env.BATON_TOKEN,
    tlsCa: options.tlsCa ?? env.BATON_TLS_CA,
    clientCert: options.clientCert ?? env.BATON_TLS_CLIENT_CERT,
    clientKey: options.clientKey ?? env.BATON_TLS_CLIENT_KEY,
  };
  if (options.url) return Endpoint.parse(options.url, extra);
  if (options.socketPath) return new Endpoint({ ...extra, scheme: 'unix', path: String(options.socketPath) });
  if (env.BATON_URL) return Endpoint.parse(env.BATON_URL, extra);
  return new Endpoint({ ...extra, scheme: 'unix', path: socketPath() });
}

/**
 * One socket to batond. `send` writes a request at once (so concurrent calls are
 * pipelined) and resolves to its result; batond answers a connection's requests in the
 * order sent, so answers are matched first in, first out (an answer to a line batond
 * could not read carries `id: null`). Lines without an id are notifications, emitted as
 * 'notification'. Emits 'close' once, when the socket is gone.
 */
export class Connection extends EventEmitter {
  #socket;
  #pending = [];
  #nextId = 0;
  #partial = [];
  #holds = 0;
  #error = null;
  #corked = false;

  constructor(socket, endpoint) {
    super();
    this.endpoint = endpoint;
    this.closed = false;
    this.#socket = socket;
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => this.#read(chunk));
    socket.on('error', (err) => {
      this.#error = err;
    });
    // batond closed its side: nothing written from now on can be read by it.
    socket.on('end', () => {
      this.closed = true;
    });
    socket.on('close', () => this.#closed());
    this.#refresh();
  }

  /** Writes the request; resolves to its result or rejects with its typed error. Throws
   * `NotSent` at once when the connection is already closed (nothing was written). */
  send(method, params = {}) {
    if (this.closed) throw new NotSent(this.#error);
    const id = ++this.#nextId;
    const line = `${JSON.stringify({ id, method, params })}\n`;
    const answer = new Promise((resolve, reject) => this.#pending.push({ id, method, resolve, reject }));
    // Requests sent in the same turn of the event loop (Promise.all of many calls) leave
    // in one write.
    if (!this.#corked) {
      this.#corked = true;
      this.#socket.cork();
      process.nextTick(() => {
        this.#corked = false;
        this.#socket.uncork();
      });
    }
    this.#socket.write(line);
    this.#refresh();
    return answer;
  }

  /** Keeps the process alive while held (a subscriber waiting for events). */
  hold() {
    this.#holds++;
    this.#refresh();
  }

  release() {
    this.#holds = Math.max(0, this.#holds - 1);
    this.#refresh();
  }

  pause() {
    this.#socket.pause();
  }

  resume() {
    this.#socket.resume();
  }

  close() {
    this.closed = true;
    this.#socket.destroy();
  }

  // An idle connection does not keep the process alive: a script that forgot close()
  // still ends, as a Python script does.
  #refresh() {
    if (this.#pending.length > 0 || this.#holds > 0) this.#socket.ref();
    else this.#socket.unref();
  }

  #read(chunk) {
    let start = 0;
    let end;
    while ((end = chunk.indexOf('\n', start)) >= 0) {
      let line = chunk.slice(start, end);
      if (this.#partial.length) {
        this.#partial.push(line);
        line = this.#partial.join('');
        this.#partial = [];
      }
      start = end + 1;
      this.#line(line);
    }
    if (start < chunk.length) this.#partial.push(chunk.slice(start));
  }

  #line(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch (err) {
      this.#fail(new BatonError(`batond sent a line that is not JSON (${err.message}); report it with the daemon's log`, { kind: 'protocol' }));
      return;
    }
    if (!message || typeof message !== 'object' || !('id' in message)) {
      this.emit('notification', message);
      return;
    }
    const request = this.#pending.shift();
    this.#refresh();
    if (!request) return;
    if (message.id !== null && message.id !== request.id) {
      this.#fail(new BatonError(`the answer to request ${message.id} arrived for request ${request.id}; report it with the daemon's log`, { kind: 'protocol' }));
      request.reject(new ConnectionLostError(`${request.method}: batond's answers went out of order; the request may or may not have taken effect`, { kind: 'connection_lost' }));
      return;
    }
    if (message.error) request.reject(fromWire(message.error));
    else request.resolve(message.result);
  }

  #fail(err) {
    this.#error = err;
    this.close();
  }

  #closed() {
    this.closed = true;
    const pending = this.#pending;
    this.#pending = [];
    for (const request of pending) {
      request.reject(
        new ConnectionLostError(
          `${request.method}: the connection to batond ended before it answered (${this.#error?.message ?? 'closed'}); the request may or may not have taken effect (check, or retry with an idempotency_key)`,
          { kind: 'connection_lost' },
          { cause: this.#error ?? undefined },
        ),
      );
    }
    this.emit('close', this.#error);
  }
}

/** A request that was not written: the connection had closed before it. */
export class NotSent extends Error {
  constructor(cause) {
    super('the connection to batond is closed', { cause });
  }
}
