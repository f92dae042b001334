// baton-client: a Node client for batond, the coordination daemon for multi-agent systems.
//
//   import { Client } from 'baton-client';
//   const c = new Client();                      // BATON_URL, else the local socket
//   await c.update('campaign', 'budget', (usd) => usd - 2000);
//   await c.withLock('file:src/lib.rs', async (lease) => { ...; lease.outcome = 'modified'; });

export { Client, fenceParam, MAX_PAGE } from './client.js';
export { Connection, defaultOwner, Endpoint, resolveEndpoint, socketPath } from './connection.js';
export { Agent, Lease, TaskNode } from './held.js';
export { Subscription } from './subscription.js';
export {
  BatonError,
  CompactedError,
  ConflictError,
  ConnectionLostError,
  DaemonUnreachableError,
  ERROR_CLASSES,
  FencedError,
  ForbiddenError,
  fromWire,
  IdempotencyConflictError,
  InternalError,
  InvalidError,
  InvalidParamsError,
  InvalidRequestError,
  LeaseInvalidError,
  LeaseLostError,
  LockBusyError,
  MethodNotFoundError,
  NotFoundError,
  OverloadedError,
  ParseError,
  ProtocolError,
  RequestTooLargeError,
  RetriesExhaustedError,
  UnauthenticatedError,
  UnavailableError,
  ValueTooLargeError,
} from './errors.js';
