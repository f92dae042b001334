// What a client holds and keeps alive with background heartbeats: a lock's lease, an
// agent's session, a task node's lease. Each heartbeat goes out on the client's heartbeat
// connection (never behind a waiting call), every ttl/3 by default; when batond says the
// claim is gone, the holder is marked `lost`, its `signal` aborts and it emits 'lost'.

import { EventEmitter } from 'node:events';

import { BatonError, LeaseInvalidError, LeaseLostError, NotFoundError } from './errors.js';

/** A third of the lease: two heartbeats may be lost before it lapses. */
export const heartbeatInterval = (ttlSecs) => Math.max((ttlSecs * 1000) / 3, 50);

/** Calls `beat()` every `ms` until stopped; marks `target` lost when batond says the
 * claim is gone (410 or 404). Other failures (batond restarting) are tried again. */
export class Heartbeat {
  #timer = null;
  #stopped = false;
  #running = null;

  constructor(ms, beat, target) {
    this.ms = ms;
    this.beat = beat;
    this.target = target;
    if (ms > 0) this.#schedule();
  }

  #schedule() {
    this.#timer = setTimeout(() => {
      this.#running = this.#once().finally(() => {
        this.#running = null;
      });
    }, this.ms);
    // Like the Python client's daemon threads: a heartbeat alone never keeps the process alive.
    this.#timer.unref();
  }

  async #once() {
    try {
      const answer = await this.beat();
      if (this.#stopped) return;
      this.target.emit('heartbeat', answer);
    } catch (err) {
      if (this.#stopped) return;
      if (err instanceof LeaseInvalidError || err instanceof NotFoundError) {
        this.target.markLost(err);
        return;
      }
      if (!(err instanceof BatonError)) throw err;
    }
    if (!this.#stopped) this.#schedule();
  }

  /** Stops beating; resolves once a heartbeat under way has ended. */
  async stop() {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running?.catch(() => {});
  }
}

/** Something held on a lease: `lost`, `signal`, 'heartbeat' and 'lost' events. */
class Held extends EventEmitter {
  #abort = new AbortController();

  constructor() {
    super();
    this.lost = false;
  }

  /** Aborted (with a LeaseLostError) once a heartbeat found the claim gone: hand it to
   * the work the claim guards (fetch, child processes, model calls). */
  get signal() {
    return this.#abort.signal;
  }

  markLost(cause) {
    if (this.lost) return;
    this.lost = true;
    const err = this.lostError(cause);
    this.#abort.abort(err);
    this.emit('lost', err);
  }

  /** Throws LeaseLostError when a heartbeat found the claim gone: stop the work. */
  check() {
    if (this.lost) throw this.lostError();
  }
}

/**
 * A held resource lock (`client.lock()`): the lease's wire fields (`resource_key`,
 * `lease_id`, `owner`, `fencing_token`, `expires_at`, ...), heartbeats in the background
 * until `release()`. Set `outcome` (and `moved_to`, `note`) before releasing, or pass it.
 */
export class Lease extends Held {
  #client;
  #beat = null;
  #released = null;

  constructor(client, answer, { ttl_secs, heartbeat_ms }) {
    super();
    this.#client = client;
    Object.assign(this, answer);
    delete this.status;
    /** The whole answer of AcquireResourceLock. */
    this.raw = answer;
    this.outcome = 'released';
    this.moved_to = undefined;
    this.note = undefined;
    const ms = heartbeat_ms ?? heartbeatInterval(ttl_secs);
    this.#beat = new Heartbeat(
      ms,
      () => client.heartbeater().heartbeatLock(this.resource_key, this.lease_id, { ttl_secs }),
      this,
    );
  }

  /** What a write passes as `fence` to land only while this lease is live:
   * `{resource_key, lease_id}` (the Lease itself may be passed too). */
  get fence() {
    return { resource_key: this.resource_key, lease_id: this.lease_id };
  }

  /** `{resource_key, fencing_token}`: holds while no newer lease was granted on the key.
   * It carries no lease id, so it can be handed to another process or store. */
  get tokenFence() {
    return { resource_key: this.resource_key, fencing_token: this.fencing_token };
  }

  lostError(cause) {
    return new LeaseLostError(
      `the lease on ${this.resource_key} was lost (expired or taken over); stop the work it guarded and acquire it again`,
      { kind: 'lease_lost' },
      cause ? { cause } : undefined,
    );
  }

  /**
   * Stops the heartbeats and releases the lease with `outcome` (default: this.outcome,
   * `released`), recorded for the next holder. Throws LeaseLostError when the lease was
   * lost meanwhile (nothing the work wrote under a fence landed after that). Calling it
   * again does nothing.
   */
  release(outcome, { moved_to, note } = {}) {
    this.#released ??= this.#release(outcome ?? this.outcome, moved_to ?? this.moved_to, note ?? this.note);
    return this.#released;
  }

  async #release(outcome, moved_to, note) {
    await this.#beat.stop();
    if (!this.lost) {
      try {
        return await this.#client.releaseLock(this.resource_key, this.lease_id, { outcome, moved_to, note });
      } catch (err) {
        if (!(err instanceof LeaseInvalidError)) throw err;
        this.markLost(err);
      }
    }
    throw this.lostError();
  }

  /** `await using lease = await client.lock(key)`: released at the end of the block. */
  async [Symbol.asyncDispose]() {
    await this.release();
  }
}

/**
 * A live agent session (`client.register()`): `name`, `session_id` (its secret: pass the
 * Agent to send, readInbox, inbox and ack), heartbeats in the background until `end()`.
 */
export class Agent extends Held {
  #client;
  #beat = null;
  #ended = null;

  constructor(client, answer, { ttl_secs, heartbeat_ms }) {
    super();
    this.#client = client;
    this.name = answer.name;
    this.session_id = answer.session_id;
    this.expires_at = answer.expires_at;
    const ms = heartbeat_ms ?? heartbeatInterval(ttl_secs);
    this.#beat = new Heartbeat(
      ms,
      () => client.heartbeater().call('AgentHeartbeat', { session_id: this.session_id, ttl_secs }),
      this,
    );
  }

  lostError(cause) {
    return new LeaseLostError(
      `the session of agent ${this.name} has ended (expired or taken over); register again`,
      { kind: 'lease_lost' },
      cause ? { cause } : undefined,
    );
  }

  /** Ends the session (EndSession), with every lease, node and key attached to it. */
  end() {
    this.#ended ??= this.#end();
    return this.#ended;
  }

  async #end() {
    await this.#beat.stop();
    if (this.lost) return null;
    try {
      return await this.#client.call('EndSession', { session_id: this.session_id });
    } catch (err) {
      if (!(err instanceof LeaseInvalidError || err instanceof NotFoundError)) throw err;
      this.markLost(err);
      return null;
    }
  }

  async [Symbol.asyncDispose]() {
    await this.end();
  }
}

/**
 * A task node leased to this worker (AcquireNextNode): the wire's fields (`task_id`,
 * `node_id`, `lease_id`, `attempt`, `payload`, `context`, ...), with the context's
 * `goal`, `task_context`, `dependency_results` and `recent_events` at the top as well.
 */
export class TaskNode extends Held {
  #beat = null;

  constructor(answer) {
    super();
    Object.assign(this, answer);
    const context = answer.context ?? {};
    this.goal = context.goal ?? '';
    this.task_context = context.task_context ?? null;
    this.dependency_results = { ...(context.dependency_results ?? {}) };
    this.recent_events = [...(context.recent_events ?? [])];
    /** The whole answer of AcquireNextNode. */
    this.raw = answer;
  }

  lostError(cause) {
    return new LeaseLostError(
      `the lease on node ${this.node_id} of task ${this.task_id} was lost (expired, rolled back or taken); drop the work, another worker has it`,
      { kind: 'lease_lost' },
      cause ? { cause } : undefined,
    );
  }

  /** Heartbeats this node every `ms` through `client` until `stopHeartbeats()`. */
  startHeartbeats(client, ms, ttl_secs) {
    this.#beat = new Heartbeat(ms, () => client.heartbeater().heartbeatNode(this, { ttl_secs }), this);
  }

  async stopHeartbeats() {
    await this.#beat?.stop();
  }
}
