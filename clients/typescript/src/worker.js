// The worker loop (`client.runWorker`): take a node, heartbeat it while the handler runs,
// complete it with the handler's result or fail it with the handler's error.

import { LeaseInvalidError, NotFoundError } from './errors.js';
import { heartbeatInterval, Lease } from './held.js';

/** What FailNode records of a handler's error. */
export const nodeError = (err) => ({
  type: err?.name ?? typeof err,
  message: err instanceof Error ? err.message : String(err),
});

/**
 * Runs nodes until none is left (or `max_nodes`, or `signal` aborts): acquire (waiting up
 * to `wait_ms` on a connection of the worker's own), heartbeat every ttl/3 while
 * `handler(node)` runs, then CompleteNode with what it returned, or FailNode (retried
 * while attempts remain) if it threw. A node whose lease was lost meanwhile is dropped
 * (another worker has it). With `fence`, each CompleteNode carries it: once that claim is
 * lost the result is refused and FencedError ends the run. Resolves to the nodes handled.
 */
export async function runWorker(client, handler, options = {}) {
  const {
    task_id,
    owner,
    ttl_secs = 60,
    wait_ms = 1000,
    max_nodes,
    stop_when_idle = true,
    labels,
    fence,
    heartbeat_ms,
    signal,
  } = options;
  const beatEvery = heartbeat_ms ?? heartbeatInterval(ttl_secs);
  // Its own connection: a waiting AcquireNextNode holds up every answer behind it.
  const worker = client.sibling();
  let handled = 0;
  try {
    while (max_nodes === undefined || handled < max_nodes) {
      if (signal?.aborted) break;
      if (fence instanceof Lease) fence.check();
      const node = await worker.acquireNode({ task_id, owner, ttl_secs, wait_ms, labels });
      if (node === null) {
        if (stop_when_idle) break;
        continue;
      }
      handled += 1;
      node.startHeartbeats(client, beatEvery, ttl_secs);
      let result;
      try {
        result = await handler(node);
      } catch (err) {
        await node.stopHeartbeats();
        if (!node.lost) {
          try {
            await worker.failNode(node, nodeError(err));
          } catch (failed) {
            if (!(failed instanceof LeaseInvalidError || failed instanceof NotFoundError)) throw failed;
          }
        }
        continue;
      }
      await node.stopHeartbeats();
      if (node.lost) continue;
      try {
        await worker.completeNode(node, result ?? null, { fence });
      } catch (err) {
        if (!(err instanceof LeaseInvalidError)) throw err;
        node.markLost(err);
      }
    }
  } finally {
    worker.close();
  }
  return handled;
}
