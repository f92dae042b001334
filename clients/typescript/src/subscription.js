// Subscribe: journal events on a connection of their own, as an async iterator. Stored
// matches after `since_seq` first, then live ones, with no gap and no duplicate: when
// batond cuts the subscription off for falling behind it resubscribes after the last
// event delivered (as the Python client does), and when the connection is lost (batond
// restarted) it reconnects and resubscribes from there too.

import { setTimeout as delay } from 'node:timers/promises';

import { BatonError, CompactedError, ConnectionLostError, UnauthenticatedError } from './errors.js';

// Events read ahead of the consumer before the socket is paused (batond then queues
// them, and past its bound ends the subscription, which is resumed from where we were).
const HIGH_WATER = 1024;
const LOW_WATER = 256;

export class Subscription {
  #endpoint;
  #filter;
  #reconnectMs;
  #conn = null;
  #queue = [];
  #wake = null;
  #closed = false;
  #paused = false;

  constructor(endpoint, filter, { reconnect_ms = 30_000 } = {}) {
    this.#endpoint = endpoint;
    this.#filter = filter ?? undefined;
    this.#reconnectMs = reconnect_ms;
    /** The id batond gave the current subscription. */
    this.subscription_id = '';
    /** The seq of the last event delivered (or the start point): resume from here. */
    this.last_seq = 0;
    /** How many times it resubscribed (cut off for falling behind, or reconnected). */
    this.resumes = 0;
  }

  /** Connects and subscribes (from `since_seq`, or from now when absent). */
  async start(since_seq) {
    await this.#open(since_seq);
    return this;
  }

  async #open(since_seq) {
    const conn = await this.#endpoint.open();
    if (this.#closed) {
      conn.close();
      return;
    }
    this.#conn = conn;
    this.#paused = false;
    conn.on('notification', (message) => this.#push({ message }));
    conn.on('close', () => {
      if (this.#conn === conn) this.#push({ closed: true });
    });
    await this.#subscribe(since_seq);
  }

  async #subscribe(since_seq) {
    const params = {};
    if (since_seq !== undefined && since_seq !== null) params.since_seq = since_seq;
    if (this.#filter) params.filter = this.#filter;
    const answer = await this.#conn.send('Subscribe', params);
    this.subscription_id = answer.subscription_id;
    this.last_seq = answer.since_seq;
  }

  #push(item) {
    this.#queue.push(item);
    if (!this.#paused && this.#queue.length >= HIGH_WATER && this.#conn) {
      this.#paused = true;
      this.#conn.pause();
    }
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  async #take() {
    while (this.#queue.length === 0) {
      if (this.#closed) return null;
      const conn = this.#conn;
      conn?.hold();
      try {
        await new Promise((resolve) => {
          this.#wake = resolve;
        });
      } finally {
        conn?.release();
      }
    }
    const item = this.#queue.shift();
    if (this.#paused && this.#queue.length <= LOW_WATER) {
      this.#paused = false;
      this.#conn?.resume();
    }
    return item;
  }

  /** The next event; `null` once closed. */
  async next() {
    for (;;) {
      if (this.#closed) return null;
      const item = await this.#take();
      if (item === null) return null;
      if (item.closed) {
        await this.#reconnect();
        continue;
      }
      const { method, params = {} } = item.message;
      if (params.subscription_id !== undefined && params.subscription_id !== this.subscription_id) continue;
      if (method === 'Event') {
        if (params.ended) {
          throw new UnauthenticatedError(
            `the subscription ended: its token is no longer valid (${params.ended}); authenticate with a valid token and subscribe again with since_seq ${this.last_seq}`,
            { code: 401, kind: 'unauthenticated', data: params },
          );
        }
        this.last_seq = params.event.seq;
        return params.event;
      }
      if (method === 'SubscriptionEnded') {
        if (params.reason === 'compacted') {
          throw new CompactedError(String(params.message ?? 'compacted'), { code: 416, kind: 'compacted', data: params });
        }
        // Cut off for falling behind: carry on after the last event delivered.
        this.resumes += 1;
        await this.#subscribe(this.last_seq);
      }
    }
  }

  async #reconnect() {
    this.#conn = null;
    this.#queue = this.#queue.filter((item) => !item.closed);
    const deadline = Date.now() + this.#reconnectMs;
    let pause = 25;
    for (;;) {
      if (this.#closed) return;
      try {
        await this.#open(this.last_seq);
        this.resumes += 1;
        return;
      } catch (err) {
        this.#conn?.close();
        this.#conn = null;
        if (!(err instanceof BatonError) || err instanceof UnauthenticatedError || Date.now() >= deadline) {
          throw new ConnectionLostError(
            `the subscription's connection to batond was lost and could not be made again (${err.message}); subscribe again with since_seq ${this.last_seq}`,
            { kind: 'connection_lost' },
            { cause: err },
          );
        }
        await delay(pause);
        pause = Math.min(pause * 2, 1000);
      }
    }
  }

  [Symbol.asyncIterator]() {
    return {
      next: async () => {
        const event = await this.next();
        return event === null ? { done: true, value: undefined } : { done: false, value: event };
      },
      return: async () => {
        this.close();
        return { done: true, value: undefined };
      },
    };
  }

  /** Ends the subscription and its connection; an iteration under way ends. */
  close() {
    this.#closed = true;
    this.#conn?.close();
    this.#conn = null;
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  async [Symbol.asyncDispose]() {
    this.close();
  }
}
