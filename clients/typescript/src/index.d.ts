/// <reference types="node" />
// The declarations of baton-client. Every params and result type comes from src/wire/,
// generated from batond's DescribeInterface (scripts/gen-types.mjs); option bags are a
// method's params less its positional arguments, named as on the wire.

import { EventEmitter } from 'node:events';

import type * as W from './wire/index.js';
import type { LeaseLostError } from './errors.js';

export * from './errors.js';
export type * as wire from './wire/index.js';
export type { ErrorKind, Json, MethodName, Methods } from './wire/index.js';

/** Where batond is: a socket path, a URL, or these; unset fields come from the
 * environment (BATON_URL, BATON_SOCKET_PATH, BATON_HOME, BATON_TOKEN, BATON_TLS_CA,
 * BATON_TLS_CLIENT_CERT, BATON_TLS_CLIENT_KEY). */
export interface ClientOptions {
  /** The Unix socket (default: BATON_SOCKET_PATH, $BATON_HOME/baton.sock, ~/.baton/baton.sock). */
  socketPath?: string;
  /** `unix:///PATH`, `tls://HOST:PORT` or `tcp://127.0.0.1:PORT` (default: BATON_URL). */
  url?: string;
  /** Sent with Authenticate right after connecting (default: BATON_TOKEN). */
  token?: string;
  /** A PEM file with the CA of batond's certificate (default: BATON_TLS_CA, else Node's roots). */
  tlsCa?: string;
  /** Client certificate and key (PEM files), when batond asks for one. */
  clientCert?: string;
  clientKey?: string;
}

/** A stored value and its version (get, list, export, update). */
export interface BatonRecord<T = unknown> {
  namespace: string;
  key: string;
  value: T;
  version: number;
  revision: number;
  updated_by: string | null;
  updated_at: string | null;
}

/** A journal event. */
export type BatonEvent = W.Event;

/** What `fence` takes: a held Lease, or `{resource_key, lease_id}` /
 * `{resource_key, fencing_token}`. */
export type Fence = Lease | W.Fence;

type Fenced<P> = Omit<P, 'fence'> & { fence?: Fence | null };

export type SetOptions = Fenced<Omit<W.SetParams, 'namespace' | 'key' | 'value'>>;
export type DeleteOptions = Fenced<Omit<W.DeleteParams, 'namespace' | 'key'>>;
export type ListOptions = Omit<W.ListParams, 'namespace'>;
export interface HistoryOptions {
  /** The newest `limit` versions (default: every version kept). */
  limit?: number;
  before_version?: number;
}
export type TxnOp = Fenced<W.TxnOp>;
export type TxnCompare = W.TxnCompare | Lease;
export type TxnOptions = Fenced<Omit<W.TxnParams, 'compare' | 'ops'>>;
export interface UpdateOptions {
  /** Conflicts retried before RetriesExhaustedError (default 10). */
  retries?: number;
  updated_by?: string;
  fence?: Fence | null;
}

export type AcquireLockOptions = Omit<W.AcquireResourceLockParams, 'resource_key'>;
export interface LockOptions extends AcquireLockOptions {
  /** Lease length (default 60). */
  ttl_secs?: number;
  /** Milliseconds between heartbeats (default ttl/3; 0: none). */
  heartbeat_ms?: number;
}
export type ListLocksOptions = Omit<W.ListResourceLocksParams, 'after' | 'limit'>;
export type ReleaseOptions = Omit<W.ReleaseResourceLockParams, 'resource_key' | 'lease_id'>;

export interface RegisterOptions extends Omit<W.RegisterAgentParams, 'name'> {
  /** The session's length (default 60). */
  ttl_secs?: number;
  /** Milliseconds between heartbeats (default ttl/3; 0: none). */
  heartbeat_ms?: number;
}
export type SendOptions = Omit<W.SendMessageParams, 'session_id' | 'to' | 'body'>;
export type ReadInboxOptions = Omit<W.ReadInboxParams, 'session_id'>;

export type RegisterTaskOptions = Omit<W.RegisterTaskParams, 'goal' | 'nodes'>;
export interface AcquireNodeOptions extends Omit<W.AcquireNextNodeParams, 'lease_owner'> {
  /** Who works on the node (default BATON_OWNER, else host:pid). */
  owner?: string;
  lease_owner?: string;
}
export type CompleteNodeOptions = Fenced<Omit<W.CompleteNodeParams, 'task_id' | 'node_id' | 'lease_id' | 'result'>>;
export type FailNodeOptions = Omit<W.FailNodeParams, 'task_id' | 'node_id' | 'lease_id' | 'error'>;

export interface WorkerOptions {
  /** Only this task's nodes (default: any task's). */
  task_id?: string;
  owner?: string;
  /** The node lease's length (default 60). */
  ttl_secs?: number;
  /** How long each AcquireNextNode waits for a node (default 1000). */
  wait_ms?: number;
  /** Stop after this many nodes. */
  max_nodes?: number;
  /** Stop when no node came within `wait_ms` (default true). */
  stop_when_idle?: boolean;
  labels?: string[];
  /** Each CompleteNode carries it; a refusal (FencedError) ends the run. */
  fence?: Fence | null;
  /** Milliseconds between a node's heartbeats (default ttl/3). */
  heartbeat_ms?: number;
  /** Stops the loop before its next node. */
  signal?: AbortSignal;
}

export type ReadEventsOptions = Omit<W.ReadEventsParams, 'since_seq'>;
export type PublishOptions = Fenced<Omit<W.PublishParams, 'topic' | 'payload'>>;
export interface SubscribeOptions {
  /** Replay stored events after this seq first (default: only events from now on). */
  since_seq?: number;
  /** How long to keep trying to reconnect after the connection is lost (default 30000). */
  reconnect_ms?: number;
}

export type BreakLockOptions = Omit<W.BreakLockParams, 'resource_key'>;
export type RetryNodeOptions = Omit<W.RetryNodeParams, 'task_id' | 'node_id'>;
export type EndAgentSessionOptions = Omit<W.EndAgentSessionParams, 'name'>;

type Paged<R, F extends keyof R> = Omit<R, 'next'> & { next: string | null } & Pick<R, F>;

/** A connection to batond. Calls share one connection and are pipelined on it; a call
 * that waits (`wait_ms`, waitLock) runs on a connection of its own, and heartbeats,
 * subscriptions, inboxes and worker loops open their own too. */
export declare class Client {
  constructor(target?: string | ClientOptions | Endpoint);
  readonly endpoint: Endpoint;
  /** The Unix socket's path, or the URL. */
  readonly socketPath: string;

  /** Opens (and authenticates) the connection now rather than at the first call. */
  connect(): Promise<this>;
  /** Any method by name: its result, or its typed error. */
  call<M extends W.MethodName>(method: M, params?: W.Methods[M]['params']): Promise<W.Methods[M]['result']>;
  /** A method this version's DescribeInterface does not list (AdvanceClock on a test daemon). */
  call<N extends string>(method: Exclude<N, W.MethodName>, params?: Record<string, unknown>): Promise<unknown>;
  /** A client of the same endpoint, on connections of its own. */
  sibling(): Client;
  /** The client the heartbeats go out on. */
  heartbeater(): Client;
  /** Closes every connection (a later call opens a new one). */
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;

  get<T = unknown>(namespace: string, key: string): Promise<BatonRecord<T> | null>;
  set(namespace: string, key: string, value: unknown, options?: SetOptions): Promise<W.SetResult>;
  delete(namespace: string, key: string, options?: DeleteOptions): Promise<W.DeleteResult>;
  list<T = unknown>(namespace: string, options?: ListOptions): Promise<{ records: Array<BatonRecord<T>>; next: string | null }>;
  history(namespace: string, key: string, options?: HistoryOptions): Promise<W.HistoryEntry[]>;
  export<T = unknown>(namespace?: string): Promise<Array<BatonRecord<T>>>;
  txn(compare: TxnCompare[], ops: TxnOp[], options?: TxnOptions): Promise<W.TxnResult>;
  update<T = unknown>(
    namespace: string,
    key: string,
    fn: (current: T | null) => T | Promise<T>,
    options?: UpdateOptions,
  ): Promise<BatonRecord<T>>;

  acquireLock(resource_key: string, options?: AcquireLockOptions): Promise<W.AcquireResourceLockResult>;
  heartbeatLock(resource_key: string, lease_id: string, options?: { ttl_secs?: number }): Promise<W.HeartbeatResourceLockResult>;
  releaseLock(resource_key: string, lease_id: string, options?: ReleaseOptions): Promise<W.ReleaseResourceLockResult>;
  lockStatus(resource_key: string): Promise<W.ResourceLockStatusResult>;
  checkFence(resource_key: string, fencing_token: number): Promise<W.CheckFenceResult>;
  listLocks(options?: ListLocksOptions): Promise<W.LockEntry[]>;
  waitLock(resource_key: string, timeout_ms: number): Promise<W.WaitResourceLockResult>;
  lock(resource_key: string, options?: LockOptions): Promise<Lease>;
  withLock<R>(resource_key: string, fn: (lease: Lease) => R | Promise<R>, options?: LockOptions): Promise<R>;

  register(name: string, options?: RegisterOptions): Promise<Agent>;
  withAgent<R>(name: string, fn: (agent: Agent) => R | Promise<R>, options?: RegisterOptions): Promise<R>;
  listAgents(): Promise<W.AgentEntry[]>;
  send(agent: Agent | string, to: string | string[], body: unknown, options?: SendOptions): Promise<W.SendMessageResult>;
  readInbox(agent: Agent | string, options?: ReadInboxOptions): Promise<W.ReadInboxResult>;
  inbox(agent: Agent | string, options?: { wait_ms?: number }): AsyncGenerator<W.Message, void, undefined>;
  ack(agent: Agent | string, up_to: number): Promise<W.AckMessagesResult>;

  registerTask(goal: string, nodes: W.NodeSpec[], options?: RegisterTaskOptions): Promise<W.RegisterTaskResult>;
  acquireNode(options?: AcquireNodeOptions): Promise<TaskNode | null>;
  heartbeatNode(node: TaskNode, options?: { ttl_secs?: number }): Promise<W.HeartbeatNodeResult>;
  completeNode(node: TaskNode, result?: unknown, options?: CompleteNodeOptions): Promise<W.CompleteNodeResult>;
  failNode(node: TaskNode, error: unknown, options?: FailNodeOptions): Promise<W.FailNodeResult>;
  commitEvent(node: TaskNode, action_type: string, payload: unknown): Promise<W.CommitEventResult>;
  taskStatus(task_id: string): Promise<Paged<W.TaskStatusResult, 'nodes'>>;
  listTasks(options?: { status?: W.TaskStatus; limit?: number }): Promise<W.TaskSummary[]>;
  cancelTask(task_id: string): Promise<W.CancelTaskResult>;
  runWorker(handler: (node: TaskNode) => unknown, options?: WorkerOptions): Promise<number>;

  breakLock(resource_key: string, options: BreakLockOptions): Promise<W.BreakLockResult>;
  retryNode(task_id: string, node_id: string, options: RetryNodeOptions): Promise<W.RetryNodeResult>;
  endAgentSession(name: string, options: EndAgentSessionOptions): Promise<W.EndAgentSessionResult>;

  readEvents(since_seq?: number, options?: ReadEventsOptions): Promise<W.ReadEventsResult>;
  publish(topic: string, payload: unknown, options?: PublishOptions): Promise<number>;
  subscribe(filter?: W.EventFilter | null, options?: SubscribeOptions): Promise<Subscription>;

  health(): Promise<W.HealthResult>;
  metrics(): Promise<W.MetricsResult>;
  describe(): Promise<W.DescribeInterfaceResult>;
}

/** Something held on a lease, kept alive by background heartbeats. */
declare class Held extends EventEmitter {
  /** Set once a heartbeat found the claim gone: stop the work it guarded. */
  lost: boolean;
  /** Aborted (with a LeaseLostError) once the claim is lost. */
  readonly signal: AbortSignal;
  /** Throws LeaseLostError when the claim was lost. */
  check(): void;
  markLost(cause?: unknown): void;
  lostError(cause?: unknown): LeaseLostError;
  on(event: 'lost', listener: (err: LeaseLostError) => void): this;
  on(event: 'heartbeat', listener: (answer: unknown) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: 'lost', listener: (err: LeaseLostError) => void): this;
  once(event: 'heartbeat', listener: (answer: unknown) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** A held resource lock (`client.lock()`), heartbeaten until `release()`. */
export declare class Lease extends Held {
  readonly resource_key: string;
  readonly lease_id: string;
  readonly owner: string;
  readonly fencing_token: number;
  readonly acquired_at: string;
  readonly expires_at: string;
  readonly remaining_ms: number;
  readonly mode?: W.LockMode;
  readonly slots?: number | null;
  readonly metadata?: unknown;
  readonly provider?: string | null;
  /** What the last holder declared when it let go. */
  readonly previous?: W.Previous | null;
  /** The whole answer of AcquireResourceLock. */
  readonly raw: W.AcquireResourceLockResult;
  /** The outcome `release()` records (default `released`). */
  outcome: W.Outcome;
  moved_to?: string;
  note?: string;
  /** `{resource_key, lease_id}`: a write fenced by it lands only while the lease is live. */
  readonly fence: { resource_key: string; lease_id: string };
  /** `{resource_key, fencing_token}`: holds while no newer lease was granted. */
  readonly tokenFence: { resource_key: string; fencing_token: number };
  /** Stops the heartbeats and releases with `outcome`; LeaseLostError if it was lost. */
  release(outcome?: W.Outcome, options?: { moved_to?: string; note?: string }): Promise<W.ReleaseResourceLockResult>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A live agent session (`client.register()`), heartbeaten until `end()`. */
export declare class Agent extends Held {
  readonly name: string;
  /** The session's secret. */
  readonly session_id: string;
  readonly expires_at: string;
  /** Ends the session, with everything attached to it. */
  end(): Promise<W.EndSessionResult | null>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A task node leased to this worker (AcquireNextNode). */
export declare class TaskNode extends Held {
  readonly task_id: string;
  readonly node_id: string;
  readonly lease_id: string;
  readonly lease_owner: string;
  readonly lease_expires_at: string;
  readonly attempt: number;
  readonly max_attempts: number;
  readonly name?: string | null;
  readonly payload?: unknown;
  readonly context: W.NodeContext;
  readonly goal: string;
  readonly task_context: unknown;
  /** Results of this node's dependencies, by node id. */
  readonly dependency_results: Record<string, unknown>;
  readonly recent_events: BatonEvent[];
  /** The whole answer of AcquireNextNode. */
  readonly raw: W.AcquiredNode;
  startHeartbeats(client: Client, ms: number, ttl_secs: number): void;
  stopHeartbeats(): Promise<void>;
}

/** Journal events as an async iterator: replay, then live, no gap, no duplicate. */
export declare class Subscription implements AsyncIterable<BatonEvent> {
  constructor(endpoint: Endpoint, filter?: W.EventFilter | null, options?: { reconnect_ms?: number });
  readonly subscription_id: string;
  /** The seq of the last event delivered (or the start point). */
  readonly last_seq: number;
  /** How many times it resubscribed (cut off for falling behind, or reconnected). */
  readonly resumes: number;
  start(since_seq?: number): Promise<this>;
  /** The next event; null once closed. */
  next(): Promise<BatonEvent | null>;
  [Symbol.asyncIterator](): AsyncIterator<BatonEvent>;
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Where batond is and how to reach it. */
export declare class Endpoint {
  constructor(options?: {
    scheme?: 'unix' | 'tcp' | 'tls';
    path?: string;
    host?: string;
    port?: number;
    token?: string;
    tlsCa?: string;
    clientCert?: string;
    clientKey?: string;
  });
  /** Reads unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT (TypeError otherwise). */
  static parse(url: string, extra?: Pick<ClientOptions, 'token' | 'tlsCa' | 'clientCert' | 'clientKey'>): Endpoint;
  readonly scheme: 'unix' | 'tcp' | 'tls';
  readonly path: string;
  readonly host: string;
  readonly port: number;
  readonly token: string | undefined;
  readonly tlsCa: string | undefined;
  readonly clientCert: string | undefined;
  readonly clientKey: string | undefined;
  toString(): string;
  /** A connected (and authenticated) Connection. */
  open(): Promise<Connection>;
  unreachable(cause: unknown): import('./errors.js').DaemonUnreachableError;
}

/** One socket to batond: requests pipelined, answers matched in order. */
export declare class Connection extends EventEmitter {
  readonly endpoint: Endpoint;
  readonly closed: boolean;
  send<M extends W.MethodName>(method: M, params?: W.Methods[M]['params']): Promise<W.Methods[M]['result']>;
  send<N extends string>(method: Exclude<N, W.MethodName>, params?: Record<string, unknown>): Promise<unknown>;
  hold(): void;
  release(): void;
  pause(): void;
  resume(): void;
  close(): void;
}

/** Where to connect, as the Python client decides it. */
export declare function resolveEndpoint(target?: string | ClientOptions | Endpoint): Endpoint;
/** BATON_SOCKET_PATH, else $BATON_HOME/baton.sock, else ~/.baton/baton.sock. */
export declare function socketPath(explicit?: string): string;
/** BATON_OWNER, else host:pid. */
export declare function defaultOwner(): string;
/** A write's `fence` as sent. */
export declare function fenceParam(fence: Fence | null | undefined): W.Fence | undefined;
/** The largest page batond serves. */
export declare const MAX_PAGE: number;
