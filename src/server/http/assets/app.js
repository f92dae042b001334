// The Baton dashboard: what a person supervising agents wants to see, live. It reads
// through batond's own read methods (POST /api/call) and follows the journal over
// server-sent events (/events). Bounded at any size and any write rate:
// - each page keeps one model and applies each journal event to it (a lock taken or
//   released, a node's new state, a key written) instead of fetching again;
// - events reach the pages in batches (at most one render per FLUSH_MS), and a reload,
//   when one is needed, is throttled: at most one in flight and at most one a second;
// - the journal keeps a fixed window (WINDOW events) and renders at most ROWS of it;
// - every list is paged (`limit`/`after`, answered `next`) and says when more exist;
// - one clock (one interval) updates every relative time on the page.
// Preact + htm, compiled into batond with this file: no network.

import { html, render, Component, useState, useEffect, useMemo, useRef } from '/assets/htm-preact.js';

// ---- talking to batond ------------------------------------------------------------

/** What the page has done, for its tests and the lag bench (`window.batonStats`). */
const stats = { calls: 0, inFlight: 0, maxInFlight: 0, reloads: 0, reloading: 0, maxReloading: 0, events: 0 };
window.batonStats = stats;

/** The session's anti-CSRF token, sent with every call (batond checks it on actions). */
const CSRF = document.querySelector('meta[name=baton-csrf]')?.content ?? '';

class CallError extends Error {
  constructor(message, code, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** Calls a method of batond with the session's token; resolves to its result. */
async function call(method, params = {}) {
  stats.calls++;
  stats.inFlight++;
  stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
  try {
    const response = await fetch('/api/call', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Baton-CSRF': CSRF },
      body: JSON.stringify({ method, params }),
      credentials: 'same-origin',
    });
    if (response.status === 401) {
      location.assign('/');
      throw new CallError('the session ended; log in again', 401, 401);
    }
    let answer;
    try {
      answer = await response.json();
    } catch {
      throw new CallError(`batond answered ${response.status} without a readable body; reload the page`, response.status, response.status);
    }
    if (answer.error) throw new CallError(answer.error.message, answer.error.code, response.status);
    return answer.result;
  } finally {
    stats.inFlight--;
  }
}

/** Methods that refused `limit`/`after` (a daemon from before paging): they answer whole. */
const unpaged = new Set();

/**
 * One page of a list: `{result, next}`. `next` is null at the end (pass it back as
 * `after`); a daemon without paging answers everything, or (List) `next_after`.
 */
async function page(method, params, limit, after) {
  const asked = { ...params };
  if (!unpaged.has(method)) {
    if (limit) asked.limit = limit;
    if (after != null) asked.after = after;
  }
  try {
    const result = await call(method, asked);
    // `paged`: the answer says whether more exist (else a full page may hide more).
    return { result, next: result.next ?? result.next_after ?? null, paged: 'next' in result || 'next_after' in result };
  } catch (err) {
    if (!unpaged.has(method) && err.code === -32602 && /`(after|limit)`/.test(err.message)) {
      unpaged.add(method);
      return page(method, params, limit, after);
    }
    throw err;
  }
}

/**
 * `run` at most once at a time and at most once every `gap` ms, however often asked: a
 * request while one runs (or too soon after) runs once more afterwards.
 */
function throttled(run, gap = 1000) {
  let running = false;
  let wanted = false;
  let timer = null;
  let last = -Infinity;
  let gone = false;
  const kick = () => {
    if (gone) return;
    if (running || timer) { wanted = true; return; }
    const wait = last + gap - performance.now();
    if (wait > 0) {
      timer = setTimeout(() => { timer = null; kick(); }, wait);
      return;
    }
    running = true;
    wanted = false;
    last = performance.now();
    stats.reloads++;
    stats.reloading++;
    stats.maxReloading = Math.max(stats.maxReloading, stats.reloading);
    Promise.resolve().then(run).catch(() => {}).finally(() => {
      stats.reloading--;
      running = false;
      if (wanted) kick();
    });
  };
  kick.stop = () => { gone = true; clearTimeout(timer); };
  return kick;
}

// ---- the journal, followed once for every page -----------------------------------

/** Events the journal page keeps (a fixed window: older ones fall out). */
const WINDOW = 500;
/** Rows of it the journal page renders. */
const ROWS = 200;
/** Pages hear of events in batches, at most this often. */
const FLUSH_MS = 250;
/** Unflushed events beyond this (a hidden tab): dropped, and the pages reload instead. */
const MAX_PENDING = 20000;

const feed = { events: [], status: 'connecting', listeners: new Set(), pending: [], signals: false, lost: false, timer: null };

function flush() {
  feed.timer = null;
  const batch = feed.pending;
  const lost = feed.lost;
  const signals = feed.signals;
  feed.pending = [];
  feed.lost = false;
  feed.signals = false;
  for (const event of batch) feed.events.push(event);
  if (feed.events.length > WINDOW) feed.events.splice(0, feed.events.length - WINDOW);
  for (const listener of feed.listeners) listener(batch, { lost, signals });
}

function schedule() {
  if (feed.timer === null) feed.timer = setTimeout(flush, FLUSH_MS);
}

function follow() {
  const source = new EventSource('/events?tail=200');
  source.onopen = () => { feed.status = 'live'; schedule(); };
  source.onerror = () => { feed.status = 'reconnecting'; schedule(); };
  // Not a journal event: someone began or stopped waiting for a lock.
  source.addEventListener('waiting', () => { feed.signals = true; schedule(); });
  source.onmessage = (message) => {
    stats.events++;
    feed.pending.push(JSON.parse(message.data));
    if (feed.pending.length > MAX_PENDING) {
      feed.pending = feed.pending.slice(-WINDOW);
      feed.lost = true;
    }
    schedule();
  };
}

/** Calls `listener(batch, {lost, signals})` with each batch of journal events. */
function useEvents(listener, deps = []) {
  const current = useRef(listener);
  current.current = listener;
  useEffect(() => {
    const each = (batch, how) => current.current(batch, how);
    feed.listeners.add(each);
    return () => feed.listeners.delete(each);
  }, deps);
}

/** Re-renders on each batch (the feed's window and status). */
function useFeed() {
  const [, setTick] = useState(0);
  useEvents(() => setTick((n) => n + 1));
  return feed;
}

/**
 * A page's model: `load(old)` gives its state (again when `deps` change, and when a
 * batch of events asks `reloadOn(batch, how)`, throttled: one in flight, one a second);
 * `apply(data, batch)` applies each batch of events to it in place (one render a batch).
 * Events that arrive while a load is in flight are applied again to what it loaded, so
 * `apply` must be idempotent (the snapshot may already hold them).
 */
function useModel(load, deps, { apply, reloadOn } = {}) {
  const [state, setState] = useState({ loading: true });
  const ref = useRef(state);
  ref.current = state;
  const hooks = useRef({});
  hooks.current = { load, apply, reloadOn };
  const reload = useMemo(() => {
    let generation = 0;
    const run = async () => {
      const mine = ++generation;
      reload.during = [];
      try {
        let data = await hooks.current.load(ref.current.data);
        if (mine !== generation || reload.stopped) return;
        const during = reload.during;
        reload.during = null;
        if (during === 'lost') reload();
        else if (data != null && hooks.current.apply) for (const batch of during) data = hooks.current.apply(data, batch);
        setState({ data });
      } catch (err) {
        reload.during = null;
        if (mine === generation && !reload.stopped) setState((s) => ({ ...s, loading: false, error: err.message }));
      }
    };
    const reload = throttled(run);
    reload.during = null;
    return reload;
  }, deps);
  useEffect(() => {
    setState({ loading: true });
    reload();
    return () => { reload.stopped = true; reload.stop(); };
  }, [reload]);
  useEvents((batch, how) => {
    if (how.lost || hooks.current.reloadOn?.(batch, how)) reload();
    if (!hooks.current.apply || !batch.length) return;
    if (Array.isArray(reload.during)) {
      reload.during.push(batch);
      if (reload.during.length > 200) reload.during = 'lost';
    }
    setState((s) => (s.data ? { data: hooks.current.apply(s.data, batch) ?? s.data } : s));
  }, [reload]);
  const update = (change) => setState((s) => (s.data ? { data: change(s.data) ?? s.data } : s));
  return { ...state, reload, update };
}

// ---- one clock --------------------------------------------------------------------

function span(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function relative(at, now = Date.now()) {
  const ms = Date.parse(at);
  if (Number.isNaN(ms)) return at;
  if (Math.abs(now - ms) < 1500) return 'just now';
  return ms <= now ? `${span(now - ms)} ago` : `in ${span(ms - now)}`;
}

/** The page's one timer: every relative time on it, once a second. */
function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll('time[data-rel]')) {
    const text = relative(el.dateTime, now);
    // The text node Preact rendered, changed in place (Preact keeps updating that node).
    const node = el.firstChild;
    if (node && node.nodeType === 3 && node.data !== text) node.data = text;
  }
}

/** "12 s ago" / "in 3 min" / "just now", with the exact time on hover. */
function When({ at }) {
  if (!at) return html`<span class="muted">–</span>`;
  return html`<time data-rel datetime=${at} title=${at}>${relative(at)}</time>`;
}

// ---- small pieces -----------------------------------------------------------------

/** A component that renders again only when one of its props changed. */
function pure(view) {
  return class extends Component {
    shouldComponentUpdate(next) {
      for (const k in next) if (next[k] !== this.props[k]) return true;
      for (const k in this.props) if (!(k in next)) return true;
      return false;
    }
    render(props) { return view(props); }
  };
}

function Loading({ state, children }) {
  if (state.error && !state.data) return html`<p class="error" role="alert">${state.error}</p>`;
  if (!state.data) return html`<p class="muted">Loading…</p>`;
  return html`${state.error ? html`<p class="error" role="alert">${state.error}</p>` : ''}${children(state.data)}`;
}

function Json({ value }) {
  if (value === undefined || value === null) return html`<span class="muted">null</span>`;
  const text = JSON.stringify(value, null, 2);
  return text.length < 60 && !text.includes('\n') ? html`<code>${text}</code>` : html`<pre>${text}</pre>`;
}

/** "Showing N", and a button for the next page when there is one. */
function More({ shown, total, next, busy, onMore, what }) {
  if (next == null && (total == null || shown >= total)) {
    return shown ? html`<p class="pager muted">${shown} ${what}, all shown.</p>` : '';
  }
  return html`<p class="pager"><span class="muted">Showing ${shown}${total != null ? ` of ${total}` : ''} ${what}; more exist.</span>
    <button type="button" class="secondary" disabled=${busy} onClick=${onMore}>${busy ? 'Loading…' : 'Load more'}</button></p>`;
}

/** A table region that scrolls sideways and can be scrolled by keyboard. */
function Scroll({ label, children }) {
  return html`<div class="scroll" tabindex="0" role="region" aria-label=${label}>${children}</div>`;
}

function Search({ label, value, onInput, note }) {
  return html`<label>${label}<input type="search" value=${value} onInput=${(e) => onInput(e.target.value)} /></label>
    ${note ? html`<span class="muted note">${note}</span>` : ''}`;
}

// ---- operator actions -------------------------------------------------------------

/** The action being confirmed (one at a time, in one dialog). */
let askAction = () => {};

/**
 * Whether this session may act: null until known. Asked once, harmlessly: a BreakLock of
 * a lease id nobody holds is 404 for a token that may break locks (nothing matches, so
 * nothing changes) and 403 for one that may not, or where batond has no such method.
 */
const acting = { can: null, listeners: new Set() };

async function probeActing() {
  const nobody = `dashboard-probe-${Date.now()}-${Math.random().toString(16).slice(2)}`;
  try {
    await call('BreakLock', { resource_key: 'file:.baton-dashboard-probe', lease_id: nobody, reason: 'the dashboard asks whether this session may act (matches nothing)' });
    acting.can = true;
  } catch (err) {
    // 403: not this token (or not this batond); anything else (404) means it may.
    acting.can = !(err.status === 403 || err.code === 403 || err.status === 401);
  }
  stats.acting = acting.can;
  for (const listener of acting.listeners) listener();
}

function useActing() {
  const [, setTick] = useState(0);
  useEffect(() => {
    const listener = () => setTick((n) => n + 1);
    acting.listeners.add(listener);
    return () => acting.listeners.delete(listener);
  }, []);
  return acting.can;
}

/**
 * A button that asks for a reason in a confirmation dialog, then calls `method` with
 * `params` and the reason. Needs the `operator` (or `admin`) grant; anything else is
 * refused by batond and the refusal is shown.
 */
function Action({ label, title, method, params, name }) {
  if (!useActing()) return '';
  return html`<button type="button" class="action" data-action=${method} aria-label=${name || label}
    onClick=${() => askAction({ label, title, method, params })}>${label}</button>`;
}

function ActionDialog() {
  const [asked, setAsked] = useState(null);
  const [reason, setReason] = useState('');
  const [outcome, setOutcome] = useState(null);
  const [busy, setBusy] = useState(false);
  const dialog = useRef(null);
  askAction = (action) => { setAsked(action); setReason(''); setOutcome(null); };
  useEffect(() => {
    const d = dialog.current;
    if (!d) return;
    if (asked && !d.open) d.showModal();
    if (!asked && d.open) d.close();
  }, [asked]);
  const submit = async (e) => {
    e.preventDefault();
    if (!reason.trim()) { setOutcome({ error: 'Say why: the reason is journalled with your name.' }); return; }
    setBusy(true);
    try {
      const result = await call(asked.method, { ...asked.params, reason: reason.trim() });
      setOutcome({ done: result });
    } catch (err) {
      const why = err.status === 403 || err.code === 403
        ? `Refused (403): ${err.message}. Acting needs a token with the operator grant: \`baton dashboard --operator\` or ask an admin.`
        : `${err.message}`;
      setOutcome({ error: why });
    } finally {
      setBusy(false);
    }
  };
  return html`<dialog ref=${dialog} class="confirm" aria-labelledby="confirm-title" onClose=${() => setAsked(null)}>
    ${asked ? html`<form method="dialog" onSubmit=${submit}>
      <h2 id="confirm-title">${asked.label}?</h2>
      <p>${asked.title}</p>
      ${outcome?.done ? html`<p class="ok" role="status">Done. <${Json} value=${outcome.done} /></p>` : html`
        <label>Reason (journalled with your name)<textarea required rows="3" value=${reason}
          onInput=${(e) => setReason(e.target.value)}></textarea></label>`}
      ${outcome?.error ? html`<p class="error" role="alert">${outcome.error}</p>` : ''}
      <div class="buttons">
        ${outcome?.done ? '' : html`<button type="submit" class="danger" disabled=${busy}>${busy ? 'Working…' : asked.label}</button>`}
        <button type="button" class="secondary" onClick=${() => setAsked(null)}>${outcome?.done ? 'Close' : 'Cancel'}</button>
      </div></form>` : ''}
  </dialog>`;
}

// ---- agents -----------------------------------------------------------------------

const AgentRow = pure(({ a }) => html`<tr data-agent=${a.name}>
  <th scope="row">${a.name}</th>
  <td>${a.role || html`<span class="muted">–</span>`}</td>
  <td>${a.locks.map((k) => html`<a class="tag" href=${lockHref(k)}>${k}</a>`)}
      ${a.nodes.map((n) => html`<a class="tag" href=${taskHref(n.task_id)}>node ${n.node_id}</a>`)}
      ${a.locks.length + a.nodes.length === 0 ? html`<span class="muted">nothing</span>` : ''}</td>
  <td>${a.unread}</td>
  <td><${When} at=${a.started_at} /></td>
  <td><${When} at=${a.last_seen} /></td>
  <td><${When} at=${a.expires_at} /></td>
  <td><${Action} label="End session" name=${`End ${a.name}'s session`} method="EndAgentSession" params=${{ name: a.name }}
    title=${`Ends ${a.name}'s session: its locks and node leases are released as if it had left.`} /></td>
</tr>`);

function Agents() {
  const [search, setSearch] = useState('');
  const model = useModel(async () => {
    const { result, next } = await page('ListAgents', {}, 1000);
    return { agents: result.agents, next };
  }, [], {
    // Agents' holdings change with locks and nodes too: reload (throttled).
    reloadOn: (batch) => batch.some((e) => /^(agent|lock|node|message)\./.test(e.type)),
  });
  const more = async () => {
    const { result, next } = await page('ListAgents', {}, 1000, model.data.next);
    model.update((d) => ({ agents: [...d.agents, ...result.agents], next }));
  };
  return html`<section class="panel" aria-labelledby="agents-title">
    <h2 id="agents-title">Agents</h2>
    <${Loading} state=${model}>${({ agents, next }) => {
      const shown = search ? agents.filter((a) => a.name.includes(search) || (a.role || '').includes(search)) : agents;
      return agents.length === 0
        ? html`<p class="empty">No agent has joined. Agents join with RegisterAgent (baton_join in MCP).</p>`
        : html`<div class="toolbar"><${Search} label="Name or role contains" value=${search} onInput=${setSearch}
            note=${next != null && search ? 'searches the agents loaded so far' : ''} /></div>
          <${Scroll} label="Agents"><table>
          <thead><tr><th scope="col">Name</th><th scope="col">Role</th><th scope="col">Holds</th>
            <th scope="col">Unread</th><th scope="col">Joined</th><th scope="col">Last seen</th><th scope="col">Expires</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
          <tbody>${shown.map((a) => html`<${AgentRow} key=${a.name} a=${a} />`)}</tbody></table><//>
          <${More} shown=${agents.length} next=${next} onMore=${more} what="agents" />`;
    }}<//>
  </section>`;
}

// ---- locks ------------------------------------------------------------------------

const lockHref = (key) => `#/locks/${encodeURIComponent(key)}`;
const taskHref = (id, node) => `#/tasks/${encodeURIComponent(id)}${node ? `/${encodeURIComponent(node)}` : ''}`;
const keyHref = (ns, key) => `#/keys/${encodeURIComponent(ns)}${key != null ? `/${encodeURIComponent(key)}` : ''}`;

/** A resource key's kind and, for `file:` and `dir:`, its path segments. */
function parseKey(key) {
  const colon = key.indexOf(':');
  const kind = colon < 0 ? '' : key.slice(0, colon);
  const rest = colon < 0 ? key : key.slice(colon + 1);
  const path = kind === 'file' || kind === 'dir' ? rest.split('/').filter(Boolean) : null;
  return { kind, rest, path };
}

/** Whether a lease on `held` is in the way of `wanted` by the `dir:`/`file:` hierarchy. */
function overlaps(wanted, held) {
  if (wanted === held) return true;
  const a = parseKey(wanted);
  const b = parseKey(held);
  if (!a.path || !b.path) return false;
  const inside = (inner, outer) => outer.length <= inner.length && outer.every((s, i) => s === inner[i]);
  return (b.kind === 'dir' && inside(a.path, b.path)) || (a.kind === 'dir' && inside(b.path, a.path));
}

/** Lock keys as a tree: `dir:` and `file:` keys by path under the workspace, the others
 * by their kind. */
function lockTree(holders, waiting) {
  const root = { name: '', children: new Map(), holders: [], waiters: [] };
  const place = (key) => {
    const { kind, rest, path } = parseKey(key);
    const segments = path ? ['workspace', ...path] : [kind || 'other', rest];
    let node = root;
    for (const segment of segments) {
      if (!node.children.has(segment)) {
        node.children.set(segment, { name: segment, children: new Map(), holders: [], waiters: [] });
      }
      node = node.children.get(segment);
    }
    node.key = key;
    node.kind = kind;
    return node;
  };
  for (const lock of holders) place(lock.resource_key).holders.push(lock);
  for (const waiter of waiting) place(waiter.resource_key).waiters.push(waiter);
  return root;
}

const Holder = pure(({ h }) => html`<span class="holder" data-holder=${h.owner} data-fencing=${h.fencing_token}>
  <span class="tag">${h.mode || 'exclusive'}${h.slots ? ` · ${h.slots} slots` : ''}</span>
  held by <strong>${h.owner}</strong> since <${When} at=${h.acquired_at} />, expires <${When} at=${h.expires_at} />
  <span class="muted"> (fencing ${h.fencing_token})</span>
  ${h.metadata != null ? html` <span class="note" title="the holder's metadata">${typeof h.metadata?.note === 'string'
    ? html`note: <q>${h.metadata.note}</q>` : html`<code>${JSON.stringify(h.metadata).slice(0, 300)}</code>`}</span>` : ''}
  <${Action} label="Break" name=${`Break ${h.owner}'s lock on ${h.resource_key}`} method="BreakLock"
    params=${{ resource_key: h.resource_key }}
    title=${`Ends ${h.owner}'s lease on ${h.resource_key} now; its next fenced write is refused and the next waiter gets the key.`} />
</span>`);

function Waiter({ w, blockers }) {
  return html`<span class="waiter" data-waiter=${w.owner}>
    <strong>${w.owner}</strong> waits (${w.mode || 'exclusive'}${w.slots ? `, ${w.slots} slots` : ''})
    ${blockers.length ? html` on ${blockers.map((h, i) => html`${i ? ', ' : ''}<strong data-blocker=${h.owner}>${h.owner}</strong>${h.resource_key !== w.resource_key ? html` (<a href=${lockHref(h.resource_key)}>${h.resource_key}</a>)` : ''}, holding since <${When} at=${h.acquired_at} />`)}` : ''}
    ${w.since ? html`, waiting since <${When} at=${w.since} />` : w.seen ? html`, seen waiting since <${When} at=${w.seen} />` : ''}
  </span>`;
}

function LockNode({ node, holders }) {
  const children = [...node.children.values()].sort((a, b) => a.name.localeCompare(b.name));
  const isDir = node.kind === 'dir';
  return html`<li data-key=${node.key || undefined}>
    <span class=${`seg${isDir ? ' dir' : ''}`} title=${node.key || ''}>${node.name}${children.length || isDir ? '/' : ''}</span>
    ${isDir ? html` <span class="tag dir">dir</span><span class="muted"> (the whole directory)</span>` : ''}
    ${node.holders.map((h) => html`<${Holder} key=${h.fencing_token} h=${h} />`)}
    ${node.waiters.map((w) => html`<${Waiter} key=${w.owner} w=${w} blockers=${holders.filter((h) => overlaps(w.resource_key, h.resource_key))} />`)}
    ${children.length ? html`<ul>${children.map((c) => html`<${LockNode} key=${c.name} node=${c} holders=${holders} />`)}</ul>` : ''}
  </li>`;
}

/** The lock events the Locks page applies itself; any other `lock.*` one reloads. */
const LOCK_EVENTS = new Set(['lock.acquired', 'lock.released', 'lock.expired', 'lock.broken']);

/** New leases whose details the Locks page asks about one by one, at most. */
const DETAILS = 200;

/** Leases the Locks page renders at first; more on request. */
const LOCKS_SHOWN = 500;

function Locks({ arg }) {
  const [prefix, setPrefix] = useState(arg || '');
  const [shown, setShown] = useState(LOCKS_SHOWN);
  const seen = useRef(new Map());
  const model = useModel(async (old) => {
    // Reloads the pages loaded so far (at least one).
    const pages = Math.max(1, old?.pages ?? 1);
    let holders = [];
    let waiting = [];
    let next = null;
    for (let i = 0; i < pages; i++) {
      const answer = await page('ListResourceLocks', prefix ? { prefix } : {}, 1000, next);
      holders = holders.concat(answer.result.locks);
      waiting = waiting.concat(answer.result.waiting ?? []);
      next = answer.next;
      if (next == null) break;
    }
    // When the page first saw each waiter (the daemon does not say when it began).
    const now = new Date().toISOString();
    const known = new Map();
    for (const w of waiting) {
      const id = `${w.resource_key}\n${w.owner}`;
      w.seen = seen.current.get(id) ?? now;
      known.set(id, w.seen);
    }
    seen.current = known;
    // The last key of the pages loaded (in key order): a lease taken beyond it shows with
    // the next page.
    const upTo = next == null ? null : holders[holders.length - 1]?.resource_key ?? null;
    return { holders, waiting, next, pages, upTo, released: old?.released ?? [] };
  }, [prefix], {
    // Each lock event changes the model in place; only waits (which the journal does not
    // record) reload, throttled.
    reloadOn: (batch, { signals }) => signals || batch.some((e) => e.type.startsWith('lock.') && !LOCK_EVENTS.has(e.type)),
    apply: (d, batch) => {
      const locks = batch.filter((e) => e.type.startsWith('lock.') && e.resource_key?.startsWith(prefix));
      if (!locks.length) return d;
      let holders = d.holders;
      let waiting = d.waiting;
      let released = d.released;
      for (const e of locks) {
        if (e.type === 'lock.acquired') {
          // Beyond the pages loaded so far: it shows with the next page.
          if (d.next != null && d.upTo != null && e.resource_key > d.upTo) continue;
          const h = {
            resource_key: e.resource_key, owner: e.actor ?? '?', acquired_at: e.at,
            expires_at: e.data?.expires_at, fencing_token: e.data?.fencing_token, mode: e.data?.mode, slots: e.data?.slots,
          };
          if (holders.some((x) => x.resource_key === h.resource_key && x.fencing_token === h.fencing_token)) continue;
          holders = [...holders, h];
          // A waiter that got the key waits no more.
          waiting = waiting.filter((w) => !(w.resource_key === h.resource_key && w.owner === h.owner));
        } else if (e.type === 'lock.released' || e.type === 'lock.expired' || e.type === 'lock.broken') {
          holders = holders.filter((x) => !(x.resource_key === e.resource_key && x.fencing_token === e.data?.fencing_token));
          if (!released.some((x) => x.seq === e.seq)) released = [e, ...released].slice(0, 20);
        }
      }
      return { ...d, holders, waiting, released };
    },
  });

  // A lock event does not carry the lease's mode, slots or metadata: each new lease's key
  // is asked about once (ResourceLockStatus, one call at a time); past DETAILS keys
  // waiting, a reload is cheaper.
  const fill = useMemo(() => {
    const pending = new Set();
    // Details read but not yet shown, by key: shown together, once a batch.
    let found = new Map();
    let showing = null;
    const show = () => {
      showing = null;
      const known = found;
      found = new Map();
      model.update((d) => ({
        ...d,
        holders: d.holders.map((h) => {
          const detail = known.get(h.resource_key)?.get(h.fencing_token);
          return detail ? { ...h, ...detail, resource_key: h.resource_key } : h;
        }),
      }));
    };
    let running = false;
    const run = async () => {
      if (running) return;
      running = true;
      try {
        while (pending.size) {
          const key = pending.values().next().value;
          pending.delete(key);
          const status = await call('ResourceLockStatus', { resource_key: key }).catch(() => null);
          if (status?.status !== 'held' || status.conflicting_key !== key) continue;
          found.set(key, new Map([].concat(status.held_by).map((h) => [h.fencing_token, h])));
          showing ??= setTimeout(show, FLUSH_MS);
        }
      } finally {
        running = false;
      }
    };
    return (keys) => {
      for (const key of keys) pending.add(key);
      if (pending.size > DETAILS) { pending.clear(); model.reload(); return; }
      run();
    };
  }, [prefix]);
  useEvents((batch) => {
    const keys = batch.filter((e) => e.type === 'lock.acquired' && e.resource_key?.startsWith(prefix)).map((e) => e.resource_key);
    if (keys.length) fill(keys);
  }, [fill]);

  const more = async () => {
    const answer = await page('ListResourceLocks', prefix ? { prefix } : {}, 1000, model.data.next);
    model.update((d) => ({
      ...d, holders: [...d.holders, ...answer.result.locks], waiting: [...d.waiting, ...(answer.result.waiting ?? [])],
      next: answer.next, pages: d.pages + 1,
      upTo: answer.next == null ? null : answer.result.locks[answer.result.locks.length - 1]?.resource_key ?? d.upTo,
    }));
  };

  return html`<section class="panel" aria-labelledby="locks-title">
    <h2 id="locks-title">Locks</h2>
    <form class="toolbar" onSubmit=${(e) => e.preventDefault()}>
      <${Search} label="Resource key starts with" value=${prefix} onInput=${(v) => { setPrefix(v); setShown(LOCKS_SHOWN); }} />
    </form>
    <${Loading} state=${model}>${({ holders, waiting, next, released }) => {
      const sorted = holders.length > shown
        ? [...holders].sort((a, b) => (a.resource_key < b.resource_key ? -1 : 1)).slice(0, shown) : holders;
      const tree = lockTree(sorted, waiting);
      return html`
        ${holders.length + waiting.length === 0
          ? html`<p class="empty">No lock is held${prefix ? html` under <code>${prefix}</code>` : ''}.</p>`
          : html`<p class="muted">${holders.length} held, ${waiting.length} waiting${next != null ? ' (in the pages loaded so far)' : ''}.</p>
            <ul class="tree">${[...tree.children.values()].map((c) => html`<${LockNode} key=${c.name} node=${c} holders=${holders} />`)}</ul>`}
        ${holders.length > shown ? html`<p class="pager"><span class="muted">Showing ${shown} of ${holders.length} leases loaded.</span>
          <button type="button" class="secondary" onClick=${() => setShown(shown + LOCKS_SHOWN)}>Show ${Math.min(LOCKS_SHOWN, holders.length - shown)} more</button></p>` : ''}
        <${More} shown=${holders.length} next=${next} onMore=${more} what="leases" />
        ${released.length ? html`<h3>Just released</h3><ul class="released">${released.map((e) => html`<li key=${e.seq} data-released=${e.resource_key}>
          <a href=${lockHref(e.resource_key)}>${e.resource_key}</a> · ${e.type.slice(5)}
          ${e.type === 'lock.broken' ? html` by <strong>${e.data?.by ?? e.actor ?? '?'}</strong> (held by ${e.actor ?? '?'})` : html` by <strong>${e.actor ?? '?'}</strong>`}
          <${When} at=${e.at} />${e.data?.outcome && e.type !== 'lock.broken' ? html` · ${e.data.outcome}` : ''}${e.data?.moved_to ? html` to ${e.data.moved_to}` : ''}
          ${e.data?.reason ? html` · reason: <q class="note">${e.data.reason}</q>` : e.data?.note ? html` · note: <q class="note">${e.data.note}</q>` : ''}</li>`)}</ul>` : ''}`;
    }}<//>
  </section>`;
}

// ---- tasks ------------------------------------------------------------------------

/** Columns by depth (longest chain of dependencies), rows in order within a column. */
function layout(nodes) {
  const byId = new Map(nodes.map((n) => [n.node_id, n]));
  const depth = new Map();
  const depthOf = (id) => {
    // Iterative, so a 100,000-node chain does not overflow the stack.
    const stack = [id];
    const visiting = new Set();
    while (stack.length) {
      const top = stack[stack.length - 1];
      if (depth.has(top)) { stack.pop(); continue; }
      const deps = (byId.get(top)?.dependencies || []).filter((d) => byId.has(d));
      const todo = deps.filter((d) => !depth.has(d) && !visiting.has(d));
      if (todo.length && !visiting.has(top)) { visiting.add(top); stack.push(...todo); continue; }
      depth.set(top, deps.length ? 1 + Math.max(...deps.map((d) => depth.get(d) ?? 0)) : 0);
      stack.pop();
    }
    return depth.get(id);
  };
  const columns = [];
  for (const n of nodes) {
    const d = depthOf(n.node_id);
    (columns[d] = columns[d] || []).push(n);
  }
  const at = new Map();
  const [W, H, GX, GY] = [150, 36, 60, 14];
  columns.forEach((column, x) => column.forEach((n, y) => at.set(n.node_id, { x: 10 + x * (W + GX), y: 10 + y * (H + GY) })));
  const width = 20 + columns.length * (W + GX) - GX;
  const height = 20 + Math.max(1, ...columns.map((c) => c.length)) * (H + GY) - GY;
  return { at, width, height, W, H };
}

const DagNode = pure(({ n, p, W, H }) => html`<g data-node=${n.node_id} data-state=${n.state}>
  <title>${n.node_id}: ${n.state}</title>
  <rect class=${n.state} x=${p.x} y=${p.y} width=${W} height=${H} />
  <text x=${p.x + 8} y=${p.y + 15}>${(n.name || n.node_id).slice(0, 20)}</text>
  <text x=${p.x + 8} y=${p.y + 29} class="muted">${n.state}</text></g>`);

function Dag({ nodes, shape }) {
  // The layout changes only with the graph's shape, not with its nodes' states.
  const { at, width, height, W, H } = useMemo(() => layout(nodes), [shape, nodes.length]);
  const edges = useMemo(() => {
    const out = [];
    for (const n of nodes) {
      for (const d of n.dependencies || []) {
        const a = at.get(d), b = at.get(n.node_id);
        if (!a || !b) continue;
        const [x1, y1, x2, y2] = [a.x + W, a.y + H / 2, b.x, b.y + H / 2];
        out.push(html`<path class="edge" d=${`M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}`} marker-end="url(#arrow)" />`);
      }
    }
    return out;
  }, [shape, nodes.length]);
  return html`<div class="dag-box" tabindex="0" role="region" aria-label="The task's graph"><svg class="dag" viewBox=${`0 0 ${width} ${height}`} style=${`width:${width}px`} role="img"
      aria-label=${`The task's graph: ${nodes.length} nodes; the table below lists them`}>
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse">
      <path d="M 0 0 L 10 5 L 0 10 z" fill="#8a93a6" /></marker></defs>
    ${edges}
    ${nodes.map((n) => at.has(n.node_id) ? html`<${DagNode} key=${n.node_id} n=${n} p=${at.get(n.node_id)} W=${W} H=${H} />` : '')}
  </svg></div>`;
}

const NodeRow = pure(({ n, taskId, past }) => {
  const errors = past?.errors ?? [];
  const retrying = (n.state === 'PENDING' || n.state === 'RUNNING') && (errors.length > 0 || (n.error != null && n.attempts > 0));
  const worker = n.lease_owner || past?.worker;
  return html`<tr data-node-row=${n.node_id} data-event=${n.seq} class=${retrying ? 'retrying' : ''}>
    <th scope="row">${n.name || n.node_id}${n.name && n.name !== n.node_id ? html` <span class="muted">${n.node_id}</span>` : ''}</th>
    <td><span class=${`state ${n.state}`}>${n.state}</span>
      ${retrying ? html` <span class="tag retry" data-retrying>failed, retrying</span>` : ''}</td>
    <td>${n.attempts ?? ''}${n.max_attempts ? ` of ${n.max_attempts}` : ''}</td>
    <td>${worker ? html`<span data-worker>${worker}</span>` : html`<span class="muted">–</span>`}
      ${n.lease_owner && n.lease_expires_at ? html` until <${When} at=${n.lease_expires_at} />` : ''}
      ${!n.lease_owner && worker ? html` <span class="muted">(was)</span>` : ''}</td>
    <td class="wrap">${n.error != null && n.state !== 'COMPLETED' ? html`<div class="error"><${Json} value=${n.error} /></div>` : html`<${Json} value=${n.result} />`}
      ${errors.length ? html`<details class="errors"><summary>${errors.length} failed attempt${errors.length > 1 ? 's' : ''}</summary><ol>
        ${errors.map((e) => html`<li>attempt ${e.attempt ?? '?'} by ${e.actor ?? '?'}, <${When} at=${e.at} />: <span class="error"><${Json} value=${e.error} /></span></li>`)}</ol></details>` : ''}
      ${n.state === 'FAILED' ? html`<${Action} label="Retry" name=${`Retry node ${n.node_id}`} method="RetryNode" params=${{ task_id: taskId, node_id: n.node_id }}
        title=${`Puts node ${n.node_id} back to PENDING for another attempt.`} />` : ''}</td>
  </tr>`;
});

/** The node events a task's page applies itself; any other event of the task reloads. */
const NODE_EVENTS = new Set(['node.acquired', 'node.completed', 'node.failed', 'node.progress', 'task.completed', 'task.failed', 'task.registered']);

/** Events of a task read at most (pages of 1,000) for the worker and error history. */
const PAST_PAGES = 20;

/** Each node's last worker and failed attempts, from the task's journal. */
async function taskPast(taskId) {
  const past = new Map();
  let since = 0;
  let complete = false;
  for (let i = 0; i < PAST_PAGES; i++) {
    const { events, next_seq } = await call('ReadEvents', {
      task_id: taskId, since_seq: since, limit: 1000, types: ['node.acquired', 'node.failed'],
    });
    for (const e of events) notePast(past, e);
    if (events.length < 1000) { complete = true; break; }
    since = next_seq;
  }
  return { past, since, complete };
}

function notePast(past, e) {
  if (!e.node_id) return;
  const p = past.get(e.node_id) ?? { errors: [], seq: 0 };
  // Applied already (an event seen both in a read and live).
  if (e.seq <= p.seq) return;
  const next = { worker: p.worker, errors: p.errors, seq: e.seq };
  if (e.actor && (e.type === 'node.acquired' || e.type === 'node.completed')) next.worker = e.actor;
  if (e.type === 'node.failed') next.errors = [...p.errors, { attempt: e.data?.attempt, actor: e.actor, at: e.at, error: e.data?.error }].slice(-20);
  past.set(e.node_id, next);
}

const NODES_PAGE = 1000;

function TaskDetail({ taskId }) {
  // Nodes drawn and listed (a daemon without paging answers every node).
  const [drawn, setDrawn] = useState(NODES_PAGE);
  const model = useModel(async () => {
    const [{ result, next }, history] = await Promise.all([
      page('TaskStatus', { task_id: taskId }, NODES_PAGE),
      taskPast(taskId).catch(() => ({ past: new Map(), complete: false })),
    ]);
    return { ...result, next, past: history.past, pastComplete: history.complete, shape: {} };
  }, [taskId], {
    // What an event does not carry (a rolled-back node's new state, a cancel's nodes, an
    // event this page does not know).
    reloadOn: (batch) => batch.some((e) => e.task_id === taskId && !NODE_EVENTS.has(e.type) && e.type !== 'task.running'),
    apply: (d, batch) => {
      const mine = batch.filter((e) => e.task_id === taskId);
      if (!mine.length) return d;
      let { task, counts, nodes, past } = d;
      const index = new Map(nodes.map((n, i) => [n.node_id, i]));
      nodes = nodes.slice();
      counts = { ...counts };
      past = new Map(past);
      for (const e of mine) {
        if (e.type.startsWith('task.') && e.type !== 'task.registered') {
          task = { ...task, status: e.type.slice(5), updated_at: e.at };
          continue;
        }
        const i = index.get(e.node_id);
        notePast(past, e);
        const n = i == null ? null : nodes[i];
        const state = nodeState(e, n);
        if (state && n && state !== n.state) {
          counts[n.state] = Math.max(0, (counts[n.state] ?? 1) - 1);
          counts[state] = (counts[state] ?? 0) + 1;
        }
        if (!n) continue;
        if (e.seq <= (n.seq ?? 0)) continue;
        const changed = { ...n, state: state ?? n.state, updated_at: e.at, seq: e.seq };
        if (e.type === 'node.acquired') {
          changed.lease_owner = e.actor ?? null;
          changed.lease_expires_at = e.data?.lease_expires_at ?? null;
          changed.attempts = e.data?.attempt ?? n.attempts;
        } else if (e.type === 'node.completed') {
          changed.lease_owner = null;
          changed.lease_expires_at = null;
          if (e.data && 'result' in e.data) changed.result = e.data.result;
        } else if (e.type === 'node.failed') {
          changed.lease_owner = null;
          changed.lease_expires_at = null;
          changed.error = e.data?.error ?? n.error;
          changed.attempts = e.data?.attempt ?? n.attempts;
        } else if (e.type === 'node.rolled_back') {
          changed.lease_owner = null;
          changed.lease_expires_at = null;
        }
        nodes[i] = changed;
      }
      return { ...d, task, counts, nodes, past };
    },
  });
  const more = async () => {
    const { result, next } = await page('TaskStatus', { task_id: taskId }, NODES_PAGE, model.data.next);
    model.update((d) => ({ ...d, nodes: [...d.nodes, ...result.nodes], next, shape: {} }));
  };
  return html`<${Loading} state=${model}>${({ task, counts, nodes: loaded, next, past, pastComplete, shape }) => {
    const nodes = loaded.length > drawn ? loaded.slice(0, drawn) : loaded;
    return html`
    <h3>${task.goal} <span class="muted">(${task.status})</span></h3>
    <p class="muted">Task <code>${task.task_id}</code>, created <${When} at=${task.created_at} />.
      ${Object.entries(counts).filter(([, n]) => n).map(([s, n]) => html` <span class=${`state ${s}`}>${n} ${s}</span>`)}</p>
    <${Dag} nodes=${nodes} shape=${shape} />
    ${pastComplete ? '' : html`<p class="muted">Workers and failed attempts come from the task's first ${PAST_PAGES * 1000} node events and those since the page opened.</p>`}
    <${Scroll} label="The task's nodes"><table>
      <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">Attempt</th>
        <th scope="col">Worker</th><th scope="col">Result or error</th></tr></thead>
      <tbody>${nodes.map((n) => html`<${NodeRow} key=${n.node_id} n=${n} taskId=${taskId} past=${past.get(n.node_id)} />`)}</tbody></table><//>
    ${loaded.length > drawn ? html`<p class="pager"><span class="muted">Showing ${drawn} of ${loaded.length} nodes loaded.</span>
      <button type="button" class="secondary" onClick=${() => setDrawn(drawn + NODES_PAGE)}>Show ${Math.min(NODES_PAGE, loaded.length - drawn)} more</button></p>`
      : html`<${More} shown=${loaded.length} total=${Object.values(counts).reduce((a, b) => a + b, 0)} next=${next} onMore=${more} what="nodes" />`}`;
  }}<//>`;
}

/** A node's state after event `e`, when the event says. */
function nodeState(e, n) {
  switch (e.type) {
    case 'node.acquired': return 'RUNNING';
    case 'node.completed': return 'COMPLETED';
    case 'node.failed': return e.data?.status ?? (e.data?.retry ? 'PENDING' : 'FAILED');
    case 'node.rolled_back': return e.data?.status ?? null;
    default: return n ? null : null;
  }
}

const TaskItem = pure(({ t, chosen }) => html`<li>
  <a class="task" href=${taskHref(t.task_id)} aria-current=${chosen ? 'true' : undefined} data-task=${t.task_id}>
    <strong>${t.goal}</strong><br /><span class="muted">${t.status} · <${When} at=${t.created_at} /></span>
  </a></li>`);

const TASKS_PAGE = 100;

function Tasks({ arg }) {
  const [taskId] = arg.split('/');
  const [search, setSearch] = useState('');
  const model = useModel(async () => {
    const { result, next, paged } = await page('ListTasks', {}, TASKS_PAGE);
    // A daemon without paging answers at most `limit`: say so rather than hide the rest.
    const full = !paged && result.tasks.length >= TASKS_PAGE;
    return { tasks: result.tasks, next, full };
  }, [], {
    apply: (d, batch) => {
      const tasks = batch.filter((e) => e.type.startsWith('task.'));
      if (!tasks.length) return d;
      let list = d.tasks;
      for (const e of tasks) {
        if (e.type === 'task.registered') {
          if (!list.some((t) => t.task_id === e.task_id)) {
            list = [{ task_id: e.task_id, goal: e.data?.goal ?? e.task_id, status: 'running', created_at: e.at, updated_at: e.at }, ...list];
          }
        } else {
          list = list.map((t) => (t.task_id === e.task_id ? { ...t, status: e.type.slice(5), updated_at: e.at } : t));
        }
      }
      return { ...d, tasks: list };
    },
  });
  const more = async () => {
    const { result, next } = await page('ListTasks', {}, TASKS_PAGE, model.data.next);
    model.update((d) => ({ ...d, tasks: [...d.tasks, ...result.tasks.filter((t) => !d.tasks.some((x) => x.task_id === t.task_id))], next }));
  };
  return html`<section class="panel" aria-labelledby="tasks-title">
    <h2 id="tasks-title">Tasks</h2>
    <${Loading} state=${model}>${({ tasks, next, full }) => {
      const shown = search ? tasks.filter((t) => t.goal.includes(search) || t.task_id.startsWith(search)) : tasks;
      return tasks.length === 0
        ? html`<p class="empty">No task is registered.</p>`
        : html`<div class="tasks">
          <div>
            <div class="toolbar"><${Search} label="Goal or id contains" value=${search} onInput=${setSearch}
              note=${next != null || full ? 'searches the tasks loaded so far' : ''} /></div>
            <ul class="list">${shown.map((t) => html`<${TaskItem} key=${t.task_id} t=${t} chosen=${t.task_id === taskId} />`)}</ul>
            ${full ? html`<p class="pager muted">The newest ${TASKS_PAGE} tasks are shown: this daemon does not page them further; open an older one by its address (#/tasks/ID).</p>`
              : html`<${More} shown=${tasks.length} next=${next} onMore=${more} what="tasks" />`}
          </div>
          <div class="detail">${taskId ? html`<${TaskDetail} key=${taskId} taskId=${taskId} />` : html`<p class="muted">Choose a task to see its graph.</p>`}</div>
        </div>`;
    }}<//>
  </section>`;
}

// ---- the journal ------------------------------------------------------------------

function matches(event, type, text) {
  if (type && !event.type.startsWith(type)) return false;
  if (!text) return true;
  return [event.namespace, event.key, event.resource_key, event.task_id, event.node_id, event.actor]
    .some((field) => field && String(field).includes(text));
}

const JournalRow = pure(({ e }) => html`<li data-seq=${e.seq}>
  <span class="seq">#${e.seq}</span><span class="type">${e.type}</span>
  <${When} at=${e.at} />
  ${e.actor ? html` · <strong>${e.actor}</strong>` : ''}
  ${e.resource_key ? html` · <a href=${lockHref(e.resource_key)}>${e.resource_key}</a>` : ''}
  ${e.namespace ? html` · <a href=${keyHref(e.namespace, e.key)}>${e.namespace}/${e.key ?? ''}</a>` : ''}
  ${e.task_id ? html` · <a href=${taskHref(e.task_id)}>task ${e.task_id.slice(0, 8)}${e.node_id ? `/${e.node_id}` : ''}</a>` : ''}
  ${e.data && Object.keys(e.data).length ? html` <code>${JSON.stringify(e.data).slice(0, 200)}</code>` : ''}
</li>`);

function Journal() {
  const live = useFeed();
  const [type, setType] = useState('');
  const [text, setText] = useState('');
  const [paused, setPaused] = useState(null);
  // Paused: a copy of the window as it was (bounded like the window), and a count of what
  // arrived since.
  const newest = live.events.length ? live.events[live.events.length - 1].seq : 0;
  const shown = paused === null ? live.events : paused.events;
  const waiting = paused === null ? 0 : live.events.filter((e) => e.seq > paused.seq).length;
  const rows = [];
  for (let i = shown.length - 1; i >= 0 && rows.length < ROWS; i--) {
    if (matches(shown[i], type, text)) rows.push(shown[i]);
  }
  return html`<section class="panel journal-page" aria-labelledby="journal-title">
    <h2 id="journal-title">Journal</h2>
    <div class="toolbar">
      <label>Type starts with<input value=${type} onInput=${(e) => setType(e.target.value)} placeholder="lock." /></label>
      <label>Key, task or actor contains<input value=${text} onInput=${(e) => setText(e.target.value)} /></label>
      <button type="button" class="secondary" aria-pressed=${String(paused !== null)}
        onClick=${() => setPaused(paused === null ? { events: live.events.slice(), seq: newest } : null)}>
        ${paused === null ? 'Pause' : `Resume (${waiting}${waiting >= WINDOW ? '+' : ''} new)`}</button>
    </div>
    <p class="muted">The newest ${ROWS} matching events of the last ${WINDOW} (ReadEvents or <code>baton events</code> reads further back).</p>
    <div class="journal">
      ${rows.length === 0 ? html`<p class="empty">No event yet${type || text ? ' matches the filters' : ''}.</p>` : ''}
      <ol>${rows.map((e) => html`<${JournalRow} key=${e.seq} e=${e} />`)}</ol>
    </div>
  </section>`;
}

// ---- keys -------------------------------------------------------------------------

const HISTORY_PAGE = 50;

function History({ namespace, keyName }) {
  const model = useModel(async () => {
    const { result, next } = await page('History', { namespace, key: keyName }, HISTORY_PAGE);
    return { history: result.history, next: historyNext(result, next) };
  }, [namespace, keyName], {
    reloadOn: (batch) => batch.some((e) => e.namespace === namespace && e.key === keyName),
  });
  const more = async () => {
    const cursor = model.data.next;
    const answer = cursor.before_version != null
      ? { result: await call('History', { namespace, key: keyName, limit: HISTORY_PAGE, before_version: cursor.before_version }) }
      : await page('History', { namespace, key: keyName }, HISTORY_PAGE, cursor.after);
    model.update((d) => ({ history: [...d.history, ...answer.result.history], next: historyNext(answer.result, answer.next) }));
  };
  return html`<div class="history" aria-label=${`History of ${keyName}`}>
    <${Loading} state=${model}>${({ history, next }) => html`<${Scroll} label=${`History of ${keyName}`}><table>
      <thead><tr><th scope="col">Version</th><th scope="col">When</th><th scope="col">By</th><th scope="col">Value</th></tr></thead>
      <tbody>${history.map((h) => html`<tr key=${h.version} data-version=${h.version}>
        <th scope="row">${h.version}</th><td><${When} at=${h.updated_at} /></td>
        <td>${h.updated_by || html`<span class="muted">–</span>`}</td>
        <td class="wrap">${h.deleted ? html`<em>deleted</em>` : html`<${Json} value=${h.value} />`}</td></tr>`)}</tbody>
    </table><//>
    <${More} shown=${history.length} next=${next} onMore=${more} what="versions" />`}<//></div>`;
}

/** History's next page: `next` (paged daemons), else versions before the last shown. */
function historyNext(result, next) {
  if (next != null) return { after: next };
  if (!('next' in result) && result.history.length >= HISTORY_PAGE) {
    return { before_version: result.history[result.history.length - 1].version };
  }
  return null;
}

const KEYS_PAGE = 100;

const KeyRow = pure(({ r, namespace, open }) => html`<tr data-key=${r.key} class=${open ? 'open' : ''}>
  <th scope="row"><a href=${open ? keyHref(namespace) : keyHref(namespace, r.key)} aria-expanded=${String(open)}>${r.key}</a></th>
  <td>${r.version}</td><td><${When} at=${r.updated_at} /></td>
  <td>${r.updated_by || html`<span class="muted">–</span>`}</td><td class="wrap"><${Json} value=${r.value} /></td></tr>`);

function Keys({ arg }) {
  const slash = arg.indexOf('/');
  const namespace = slash < 0 ? arg : arg.slice(0, slash);
  const keyName = slash < 0 ? '' : arg.slice(slash + 1);
  const [draft, setDraft] = useState(namespace);
  const [prefix, setPrefix] = useState('');
  const live = useFeed();
  const seen = [...new Set(live.events.filter((e) => e.namespace).map((e) => e.namespace))].sort();
  const model = useModel(async (old) => {
    if (!namespace) return null;
    const pages = Math.max(1, old?.pages ?? 1);
    let records = [];
    let next = null;
    for (let i = 0; i < pages; i++) {
      const answer = await page('List', prefix ? { namespace, prefix } : { namespace }, KEYS_PAGE, next);
      records = records.concat(answer.result.records);
      next = answer.next;
      if (next == null) break;
    }
    return { records, next, pages, upTo: next == null ? null : records[records.length - 1]?.key ?? null };
  }, [namespace, prefix], {
    // A write that is not a plain Set or Delete (a namespace cleared, a restore) reloads.
    reloadOn: (batch) => batch.some((e) => e.namespace === namespace && !e.type.startsWith('kv.')),
    apply: (d, batch) => {
      const writes = batch.filter((e) => e.namespace === namespace && e.key != null && e.key.startsWith(prefix) && e.type.startsWith('kv.'));
      if (!writes.length) return d;
      let records = d.records;
      const last = d.next == null ? null : d.upTo;
      for (const e of writes) {
        const i = records.findIndex((r) => r.key === e.key);
        if (e.type === 'kv.delete') {
          if (i >= 0) records = records.filter((_, j) => j !== i);
        } else if (e.type === 'kv.set') {
          const r = { namespace, key: e.key, value: e.data?.value, version: e.data?.version, updated_by: e.actor ?? null, updated_at: e.at };
          if (i >= 0) {
            records = records.slice();
            records[i] = { ...records[i], ...r };
          } else if (last == null || e.key < last) {
            records = [...records, r].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
          }
        }
      }
      return { ...d, records };
    },
  });
  const go = (ns) => { location.hash = keyHref(ns); };
  const more = async () => {
    const answer = await page('List', prefix ? { namespace, prefix } : { namespace }, KEYS_PAGE, model.data.next);
    model.update((d) => ({
      records: [...d.records, ...answer.result.records], next: answer.next, pages: d.pages + 1,
      upTo: answer.next == null ? null : answer.result.records[answer.result.records.length - 1]?.key ?? d.upTo,
    }));
  };
  return html`<section class="panel" aria-labelledby="keys-title">
    <h2 id="keys-title">Keys</h2>
    <form class="toolbar" onSubmit=${(e) => { e.preventDefault(); go(draft); }}>
      <label>Namespace<input list="namespaces" value=${draft} onInput=${(e) => setDraft(e.target.value)} required /></label>
      <datalist id="namespaces">${seen.map((ns) => html`<option value=${ns} />`)}</datalist>
      <button type="submit">Show</button>
      ${namespace ? html`<${Search} label="Key starts with" value=${prefix} onInput=${setPrefix} />` : ''}
    </form>
    ${namespace ? html`<${Loading} state=${model}>${(data) => !data ? html`<p class="muted">Loading…</p>` : data.records.length === 0
      ? html`<p class="empty">No live key in <code>${namespace}</code>${prefix ? html` starting with <code>${prefix}</code>` : ''}.</p>`
      : html`<${Scroll} label=${`Keys of ${namespace}`}><table>
        <thead><tr><th scope="col">Key</th><th scope="col">Version</th><th scope="col">Updated</th><th scope="col">By</th><th scope="col">Value</th></tr></thead>
        <tbody>${data.records.map((r) => html`<${KeyRow} key=${r.key} r=${r} namespace=${namespace} open=${r.key === keyName} />
          ${r.key === keyName ? html`<tr key=${`${r.key}\nhistory`} class="history-row"><td colspan="5"><${History} namespace=${namespace} keyName=${keyName} /></td></tr>` : ''}`)}</tbody>
      </table><//>
      <${More} shown=${data.records.length} next=${data.next} onMore=${more} what="keys" />`}<//>` : html`<p class="muted">Name a namespace${seen.length ? ' (the journal has shown ' + seen.join(', ') + ')' : ''}.</p>`}
    ${namespace && keyName && model.data && !model.data.records.some((r) => r.key === keyName)
      ? html`<h3>History of <code>${keyName}</code></h3><${History} namespace=${namespace} keyName=${keyName} />` : ''}
  </section>`;
}

// ---- the frame --------------------------------------------------------------------

const PAGES = [
  ['agents', 'Agents', Agents],
  ['locks', 'Locks', Locks],
  ['tasks', 'Tasks', Tasks],
  ['journal', 'Journal', Journal],
  ['keys', 'Keys', Keys],
];

function route() {
  const [page, ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  return { page: PAGES.some(([p]) => p === page) ? page : 'agents', arg: rest.map(decodeURIComponent).join('/') };
}

function Status() {
  const live = useFeed();
  const [health, setHealth] = useState(null);
  useEffect(() => { call('Health').then(setHealth, () => {}); }, []);
  return html`<span class="live" role="status"><span class=${`dot ${live.status === 'live' ? 'on' : 'off'}`}></span>
    ${live.status === 'live' ? 'live' : live.status}${health ? ` · ${health.backend || ''} · v${health.version}` : ''}</span>`;
}

function App() {
  const [where, setWhere] = useState(route());
  useEffect(() => {
    const changed = () => setWhere(route());
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  const Page = PAGES.find(([p]) => p === where.page)[2];
  return html`
    <header>
      <h1>Baton</h1>
      <nav aria-label="Pages"><ul>${PAGES.map(([p, title]) => html`<li><a href=${`#/${p}`}
        aria-current=${p === where.page ? 'page' : undefined}>${title}</a></li>`)}</ul></nav>
      <${Status} />
    </header>
    <main id="main"><${Page} key=${where.page === 'locks' ? where.arg : where.page} arg=${where.arg} /></main>
    <${ActionDialog} />`;
}

follow();
probeActing();
setInterval(tick, 1000);
const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
