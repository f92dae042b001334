// The client: one connection to batond, shared by every call (concurrent calls are
// pipelined on it), plus connections of its own for what waits or beats in the
// background. The same surface as the Python client (clients/python/baton), in camelCase;
// option names are the wire's params (snake_case), as DescribeInterface spells them.

import { ConflictError, FencedError, LockBusyError, RetriesExhaustedError } from './errors.js';
import { defaultOwner, NotSent, resolveEndpoint } from './connection.js';
import { Agent, Lease, TaskNode } from './held.js';
import { Subscription } from './subscription.js';
import { runWorker } from './worker.js';

/** The largest page batond serves (DescribeInterface `limits.max_page`). */
export const MAX_PAGE = 1000;

/** `params` without the fields left undefined or null (batond's defaults apply). */
function present(params) {
  const out = {};
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) out[k] = v;
  return out;
}

/** A write's `fence` as sent: a Lease's `{resource_key, lease_id}`, or the object given. */
export function fenceParam(fence) {
  if (fence === undefined || fence === null) return undefined;
  if (fence instanceof Lease) return fence.fence;
  return { ...fence };
}

const sessionOf = (agent) => (typeof agent === 'string' ? agent : agent.session_id);
const nodeLease = (node) => ({ task_id: node.task_id, node_id: node.node_id, lease_id: node.lease_id });

/** The pause before retry `attempt` (1, 2, ...) of a conflicting update, as the Python
 * client's: random (so writers that collided do not collide again in step), growing, at
 * most 50 ms. */
const retryPause = (attempt) => new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 ** attempt)));

export class Client {
  #conn = null;
  #opening = null;
  #idle = [];
  #beats = null;

  /**
   * `target`: a socket path, a URL (`unix:///PATH`, `tls://HOST:PORT`,
   * `tcp://127.0.0.1:PORT`), or `{socketPath, url, token, tlsCa, clientCert, clientKey}`;
   * by default BATON_URL, else the local socket. Connects at the first call (or `connect()`),
   * authenticating with the token (else BATON_TOKEN) when there is one.
   */
  constructor(target) {
    this.endpoint = resolveEndpoint(target);
  }

  /** The Unix socket's path, or the URL. */
  get socketPath() {
    return String(this.endpoint);
  }

  /** Opens (and authenticates) the connection now rather than at the first call. */
  async connect() {
    await this.#connection();
    return this;
  }

  #connection() {
    if (this.#conn && !this.#conn.closed) return this.#conn;
    this.#opening ??= this.endpoint.open().then(
      (conn) => {
        this.#conn = conn;
        this.#opening = null;
        return conn;
      },
      (err) => {
        this.#opening = null;
        throw err;
      },
    );
    return this.#opening;
  }

  /** Any method by name: its result, or its typed error. */
  async call(method, params = {}) {
    const conn = await this.#connection();
    try {
      return await conn.send(method, params);
    } catch (err) {
      if (!(err instanceof NotSent)) throw err;
    }
    // The connection had closed before the request went out (batond restarted): it was
    // not read, so it is safe to send it once more on a new connection.
    this.#conn = null;
    const again = await this.#connection();
    try {
      return await again.send(method, params);
    } catch (err) {
      if (err instanceof NotSent) throw this.endpoint.unreachable(err.cause ?? err);
      throw err;
    }
  }

  /** A call that may wait (`wait_ms`, WaitResourceLock): on a connection of its own, kept
   * for the next one, so that it never holds up this client's other answers. */
  async #waiting(method, params) {
    let conn = this.#idle.pop();
    while (conn?.closed) conn = this.#idle.pop();
    conn ??= await this.endpoint.open();
    let answer;
    try {
      answer = conn.send(method, params);
    } catch (err) {
      if (!(err instanceof NotSent)) throw err;
      // Closed while idle (batond restarted): nothing was sent; once more on a new one.
      conn = await this.endpoint.open();
      answer = conn.send(method, params);
    }
    try {
      return await answer;
    } finally {
      if (!conn.closed) this.#idle.push(conn);
    }
  }

  #maybeWaiting(method, params) {
    return params.wait_ms ? this.#waiting(method, params) : this.call(method, params);
  }

  /** A client of the same endpoint, for what runs beside this one (a worker loop). */
  sibling() {
    return new Client(this.endpoint);
  }

  /** The client heartbeats go out on (a connection of its own, made when first needed). */
  heartbeater() {
    this.#beats ??= this.sibling();
    return this.#beats;
  }

  /** Closes every connection (a later call opens a new one). */
  close() {
    this.#conn?.close();
    this.#conn = null;
    for (const conn of this.#idle.splice(0)) conn.close();
    this.#beats?.close();
    this.#beats = null;
  }

  async [Symbol.asyncDispose]() {
    this.close();
  }

  /** A paged read followed to its end (or to `total` items of `fields[0]`): the first
   * page's answer with the items of `fields` of every page. */
  async #pages(method, params, fields, total) {
    const joined = Object.fromEntries(fields.map((f) => [f, []]));
    let first = null;
    let cursor = null;
    let step = total === undefined ? { ...params } : { ...params, limit: Math.min(total, MAX_PAGE) };
    for (;;) {
      const page = await this.call(method, step);
      first ??= page;
      cursor = page.next ?? null;
      for (const f of fields) joined[f].push(...(page[f] ?? []));
      const have = joined[fields[0]].length;
      if (cursor === null || (total !== undefined && have >= total)) break;
      step = { ...step, after: cursor };
      if (total !== undefined) step.limit = Math.min(total - have, MAX_PAGE);
    }
    return { ...first, ...joined, next: cursor };
  }

  // -- versioned state ----------------------------------------------------------------

  /** The record, or null when the key does not exist. */
  async get(namespace, key) {
    const r = await this.call('Get', { namespace, key });
    return r.found ? toRecord(r) : null;
  }

  /** Writes a value. `expected_version`: absent = last writer wins, 0 = create only, N =
   * only if the stored version is N (else ConflictError with the current value). `fence`:
   * a Lease (or `{resource_key, lease_id}` / `{resource_key, fencing_token}`): written only
   * while that claim holds, else FencedError and nothing is written. */
  set(namespace, key, value, options = {}) {
    return this.call('Set', { ...present({ ...options, fence: fenceParam(options.fence) }), namespace, key, value });
  }

  /** Deletes a key (a tombstone version); options as for `set`. */
  delete(namespace, key, options = {}) {
    return this.call('Delete', { ...present({ ...options, fence: fenceParam(options.fence) }), namespace, key });
  }

  /** One page of records in key order, and the cursor of the next (`next`, null on the last). */
  async list(namespace, options = {}) {
    const r = await this.call('List', { ...present(options), namespace });
    return { records: r.records.map((x) => toRecord(x, namespace)), next: r.next ?? null };
  }

  /** Versions of a key, newest first: every one kept, or the newest `limit`. */
  async history(namespace, key, { limit, before_version } = {}) {
    const r = await this.#pages('History', present({ namespace, key, before_version }), ['history'], limit ?? undefined);
    return r.history;
  }

  /** Every live record of a namespace (or of all), read a page at a time. */
  async export(namespace) {
    const r = await this.#pages('Export', present({ namespace }), ['records']);
    return r.records.map((x) => toRecord(x));
  }

  /** All `ops` atomically if every compare holds, else ConflictError (`failed`). A compare
   * may be a lease's (`lease.fence`, `lease.tokenFence`, or the Lease); an op may carry
   * its own `fence`; `fence` here fences every op that carries none. */
  txn(compare, ops, options = {}) {
    const { fence, ...rest } = options;
    const compares = compare.map((c) => (c instanceof Lease ? c.fence : c));
    const fenced = ops.map((op) => {
      const own = op.fence ?? fence;
      return own === undefined || own === null ? op : { ...op, fence: fenceParam(own) };
    });
    return this.call('Txn', { ...present(rest), compare: compares, ops: fenced });
  }

  /**
   * Read-modify-write that never loses another writer's change: `fn(current)` (null when
   * absent; may be async) gives the new value, written with the version read; on a
   * conflict `fn` runs again on the value that won, after a short random pause. Resolves
   * to the record written; RetriesExhaustedError after `retries` conflicts in a row. With
   * `fence`, every write carries it, and a FencedError is not retried.
   */
  async update(namespace, key, fn, { retries = 10, updated_by, fence } = {}) {
    const current = await this.get(namespace, key);
    let value = current ? current.value : null;
    let version = current ? current.version : 0;
    for (let attempt = 0; attempt <= retries; attempt++) {
      const next = await fn(value);
      try {
        const r = await this.set(namespace, key, next ?? null, { expected_version: version, updated_by, fence });
        return { namespace, key, value: next ?? null, version: r.version, revision: r.revision, updated_by: updated_by ?? null, updated_at: null };
      } catch (err) {
        if (err instanceof FencedError || !(err instanceof ConflictError)) throw err;
        version = err.currentVersion;
        value = version ? err.currentValue : null;
        await retryPause(attempt + 1);
      }
    }
    throw new RetriesExhaustedError(
      `${namespace}/${key} changed under every one of ${retries + 1} attempts; retry later or raise retries`,
      { kind: 'retries_exhausted' },
    );
  }

  // -- resource locks -----------------------------------------------------------------

  /** The raw answer: status acquired / already_held (with lease_id on the acquiring
   * connection) or busy (held_by). No `owner` (nor `session_id`) means BATON_OWNER, else
   * host:pid. With `wait_ms` it waits on a connection of its own. */
  acquireLock(resource_key, options = {}) {
    const params = present({ ...options, resource_key });
    if (params.owner === undefined && params.session_id === undefined) params.owner = defaultOwner();
    return this.#maybeWaiting('AcquireResourceLock', params);
  }

  heartbeatLock(resource_key, lease_id, options = {}) {
    return this.call('HeartbeatResourceLock', { ...present(options), resource_key, lease_id });
  }

  releaseLock(resource_key, lease_id, options = {}) {
    return this.call('ReleaseResourceLock', { ...present(options), resource_key, lease_id });
  }

  lockStatus(resource_key) {
    return this.call('ResourceLockStatus', { resource_key });
  }

  /** Whether `fencing_token` is still the latest granted on `resource_key`, for a store
   * outside Baton that fences its own writes: accept a write carrying it only if `latest`. */
  checkFence(resource_key, fencing_token) {
    return this.call('CheckFence', { resource_key, fencing_token });
  }

  /** Every live lease (all pages), optionally by key prefix or owner. */
  async listLocks(options = {}) {
    return (await this.#pages('ListResourceLocks', present(options), ['locks', 'waiting'])).locks;
  }

  /** Waits up to `timeout_ms` until the key is free, without taking it (on a connection of
   * its own): status available (with `previous`) or timeout (with `held_by`). */
  waitLock(resource_key, timeout_ms) {
    return this.#waiting('WaitResourceLock', { resource_key, timeout_ms });
  }

  /**
   * Acquires `resource_key` (waiting up to `wait_ms`, else LockBusyError) and heartbeats
   * it every ttl/3 (`heartbeat_ms`; 0: none) until `lease.release(outcome)`. When a
   * heartbeat finds the lease gone, `lease.lost` is set, `lease.signal` aborts, 'lost' is
   * emitted, and `release()` throws LeaseLostError. `await using lease = await c.lock(k)`.
   */
  async lock(resource_key, options = {}) {
    const { heartbeat_ms, ttl_secs = 60, ...rest } = options;
    const answer = await this.acquireLock(resource_key, { ...rest, ttl_secs });
    const refused = refusal(answer);
    if (refused) throw refused;
    return new Lease(this, answer, { ttl_secs, heartbeat_ms });
  }

  /** `fn(lease)` under the lock: released with `lease.outcome` when `fn` resolves, or as
   * `abandoned` (the error as its note) when it throws; resolves to what `fn` returned. */
  async withLock(resource_key, fn, options = {}) {
    const lease = await this.lock(resource_key, options);
    let result;
    try {
      result = await fn(lease);
    } catch (err) {
      try {
        await lease.release('abandoned', { note: lease.note ?? `${err?.name ?? 'Error'}: ${err?.message ?? err}`.slice(0, 512) });
      } catch {
        // The lease was lost as well: the block's own error says more.
      }
      throw err;
    }
    await lease.release();
    return result;
  }

  // -- agents and inboxes -------------------------------------------------------------

  /** Joins as agent `name` (ConflictError if the name has a live session, unless
   * `takeover`) and heartbeats the session until `agent.end()`. */
  async register(name, options = {}) {
    const { heartbeat_ms, ttl_secs = 60, ...rest } = options;
    const answer = await this.call('RegisterAgent', { ...present(rest), name, ttl_secs });
    return new Agent(this, answer, { ttl_secs, heartbeat_ms });
  }

  /** `fn(agent)` as agent `name`; the session ends when `fn` settles. */
  async withAgent(name, fn, options = {}) {
    const agent = await this.register(name, options);
    try {
      return await fn(agent);
    } finally {
      await agent.end();
    }
  }

  /** Live agents: name, role, last_seen, locks, nodes, unread (all pages). */
  async listAgents() {
    return (await this.#pages('ListAgents', {}, ['agents'])).agents;
  }

  /** Sends `body` from `agent` (an Agent or its session id) to a name, names, or "*". */
  send(agent, to, body, options = {}) {
    const recipients = typeof to === 'string' && to !== '*' ? [to] : to;
    return this.call('SendMessage', { ...present(options), session_id: sessionOf(agent), to: recipients, body });
  }

  /** `{messages, next_after}`: the agent's messages after `after` (default: its
   * acknowledged cursor); with `wait_ms`, waits for one on a connection of its own. */
  readInbox(agent, options = {}) {
    return this.#maybeWaiting('ReadInbox', { ...present(options), session_id: sessionOf(agent) });
  }

  /** The agent's messages as they arrive, for as long as it is iterated (from after the
   * acknowledged cursor; `ack` what you have handled), on a connection of its own. */
  async *inbox(agent, { wait_ms = 30_000 } = {}) {
    const reader = this.sibling();
    try {
      let after;
      for (;;) {
        const page = await reader.call('ReadInbox', present({ session_id: sessionOf(agent), after, wait_ms }));
        for (const message of page.messages) yield message;
        after = page.next_after;
      }
    } finally {
      reader.close();
    }
  }

  /** Marks the agent's messages up to seq `up_to` read: `{acked, unread}`. */
  ack(agent, up_to) {
    return this.call('AckMessages', { session_id: sessionOf(agent), up_to });
  }

  // -- tasks --------------------------------------------------------------------------

  /** `nodes`: [{id?, name?, dependencies?, payload?, max_attempts?, labels?, ...}]:
   * `{task_id, node_ids}`. */
  registerTask(goal, nodes, options = {}) {
    return this.call('RegisterTask', { ...present(options), goal, nodes });
  }

  /** The next runnable node (highest priority first) whose labels are all among
   * `labels`, or null; with `wait_ms`, waits for one on a connection of its own. */
  async acquireNode(options = {}) {
    const { owner, ...rest } = options;
    const params = present({ ...rest, lease_owner: owner ?? rest.lease_owner });
    if (params.lease_owner === undefined && params.session_id === undefined) params.lease_owner = defaultOwner();
    const r = await this.#maybeWaiting('AcquireNextNode', params);
    return r ? new TaskNode(r) : null;
  }

  heartbeatNode(node, options = {}) {
    return this.call('HeartbeatNode', { ...present(options), ...nodeLease(node) });
  }

  /** Finishes the node with `result`; with `fence`, only while that claim holds (else
   * FencedError: the node stays yours, nothing is recorded). */
  completeNode(node, result = null, options = {}) {
    return this.call('CompleteNode', { ...present({ ...options, fence: fenceParam(options.fence) }), ...nodeLease(node), result });
  }

  /** Fails the node with `error` (any JSON); retried while attempts remain unless `retry` is false. */
  failNode(node, error, options = {}) {
    return this.call('FailNode', { retry: true, ...present(options), ...nodeLease(node), error });
  }

  /** Records what the node did in the task's journal (`custom.<what>` or `node.progress`). */
  commitEvent(node, action_type, payload) {
    return this.call('CommitEvent', { ...nodeLease(node), action_type, payload });
  }

  /** The task, its node counts and every node (all pages). */
  taskStatus(task_id) {
    return this.#pages('TaskStatus', { task_id }, ['nodes']);
  }

  /** Tasks, newest first (all, or the newest `limit`); `status`: running, completed,
   * failed or cancelled. */
  async listTasks({ status, limit } = {}) {
    return (await this.#pages('ListTasks', present({ status }), ['tasks'], limit ?? undefined)).tasks;
  }

  cancelTask(task_id) {
    return this.call('CancelTask', { task_id });
  }

  /** Runs nodes with `handler` until none is left; see worker.js. */
  runWorker(handler, options = {}) {
    return runWorker(this, handler, options);
  }

  // Operator actions (grant `operator`, or admin): each journalled with who and why.

  /** Ends the leases of `resource_key` (all, or the one `lease_id` or `owner` names). */
  breakLock(resource_key, options) {
    return this.call('BreakLock', { ...present(options ?? {}), resource_key });
  }

  /** Puts a FAILED node back to PENDING with fresh attempts. */
  retryNode(task_id, node_id, options) {
    return this.call('RetryNode', { ...present(options ?? {}), task_id, node_id });
  }

  /** Ends `name`'s live session as EndSession would. */
  endAgentSession(name, options) {
    return this.call('EndAgentSession', { ...present(options ?? {}), name });
  }

  // -- journal ------------------------------------------------------------------------

  /** Events after `since_seq` matching the filter (types, namespace, key_prefix,
   * resource_prefix, task_id): `{events, next_seq}`. */
  readEvents(since_seq = 0, options = {}) {
    return this.call('ReadEvents', { ...present(options), since_seq });
  }

  /** Appends a `custom.<topic>` event; resolves to its seq. `fence` as for `set`. */
  async publish(topic, payload, options = {}) {
    const r = await this.call('Publish', { ...present({ ...options, fence: fenceParam(options.fence) }), topic, payload });
    return r.event_seq;
  }

  /** Events on a connection of their own, as an async iterator: stored matches after
   * `since_seq` first (from now when absent), then live ones, with no gap and no
   * duplicate, resumed after a cut-off or a reconnect. */
  subscribe(filter, { since_seq, reconnect_ms } = {}) {
    return new Subscription(this.endpoint, filter, { reconnect_ms }).start(since_seq);
  }

  // -- system -------------------------------------------------------------------------

  health() {
    return this.call('Health');
  }

  metrics() {
    return this.call('Metrics');
  }

  /** DescribeInterface: the protocol, every method with its schemas, the error codes. */
  describe() {
    return this.call('DescribeInterface');
  }
}

function toRecord(r, namespace) {
  return {
    namespace: r.namespace ?? namespace ?? '',
    key: r.key,
    value: r.value ?? null,
    version: r.version,
    revision: r.revision ?? 0,
    updated_by: r.updated_by ?? null,
    updated_at: r.updated_at ?? null,
  };
}

/** The error for an AcquireResourceLock answer that gives no lease: busy, or
 * already_held by the same owner name through another connection (the lease id is shown
 * only to the connection that acquired it). */
export function refusal(r) {
  if (r.status === 'busy') {
    const holders = Array.isArray(r.held_by) ? r.held_by : [r.held_by ?? {}];
    const owners = holders.map((h) => h.owner).join(', ');
    const via = r.conflicting_key && r.conflicting_key !== r.resource_key ? ` (via ${r.conflicting_key})` : '';
    return new LockBusyError(
      `${r.resource_key} is held by ${owners} until ${holders[0]?.expires_at}${via}; wait (wait_ms) or try later`,
      { kind: 'busy', data: r },
    );
  }
  if (!r.lease_id) {
    return new LockBusyError(
      `${r.resource_key} is already held by ${r.owner} (this owner name) through another connection, which alone was given its lease id; release it there, or wait until it expires`,
      { kind: 'busy', data: r },
    );
  }
  return null;
}
