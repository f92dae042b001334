// The Baton dashboard: what a person supervising agents wants to see, live. It reads
// through batond's own read methods (POST /api/call) and follows the journal over
// server-sent events (/events); every change it shows arrives from the journal, so
// nothing here polls. Preact + htm, compiled into batond with this file: no network.

import { html, render, useState, useEffect, useMemo } from '/assets/htm-preact.js';

// ---- talking to batond ------------------------------------------------------------

/** Calls a read method of batond with the session's token; resolves to its result. */
async function call(method, params = {}) {
  const response = await fetch('/api/call', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ method, params }),
    credentials: 'same-origin',
  });
  if (response.status === 401) {
    location.assign('/');
    throw new Error('the session ended; log in again');
  }
  const answer = await response.json();
  if (answer.error) throw new Error(answer.error.message);
  return answer.result;
}

// ---- the journal, followed once for every page -----------------------------------

const KEEP = 2000;
const feed = { events: [], status: 'connecting', listeners: new Set() };

function emit(event) {
  for (const listener of feed.listeners) listener(event);
}

function follow() {
  const source = new EventSource('/events?tail=200');
  source.onopen = () => { feed.status = 'live'; emit(null); };
  source.onerror = () => { feed.status = 'reconnecting'; emit(null); };
  // Not a journal event: someone began or stopped waiting for a lock.
  source.addEventListener('waiting', () => emit({ type: 'lock.waiting', signal: true }));
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    feed.events.push(event);
    if (feed.events.length > KEEP) feed.events.splice(0, feed.events.length - KEEP);
    emit(event);
  };
}

/** A number that changes when a journal event matching `wanted` arrives (coalesced, so a
 * burst of events costs one reload). */
function useJournal(wanted) {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let queued = false;
    const listener = (event) => {
      if (event === null || !wanted(event) || queued) return;
      queued = true;
      setTimeout(() => { queued = false; setTick((n) => n + 1); }, 100);
    };
    feed.listeners.add(listener);
    return () => feed.listeners.delete(listener);
  }, []);
  return tick;
}

/** Every journal event and the feed's status, re-rendered on each. */
function useFeed() {
  const [, setTick] = useState(0);
  useEffect(() => {
    const listener = () => setTick((n) => n + 1);
    feed.listeners.add(listener);
    return () => feed.listeners.delete(listener);
  }, []);
  return feed;
}

/** Loads `load()` now, again whenever `deps` change, and again when the journal says
 * something it shows changed. */
function useData(load, deps, wanted) {
  const tick = useJournal(wanted);
  const [state, setState] = useState({ loading: true });
  useEffect(() => {
    let gone = false;
    load().then(
      (data) => { if (!gone) setState({ data }); },
      (error) => { if (!gone) setState({ error: error.message }); },
    );
    return () => { gone = true; };
  }, [tick, ...deps]);
  return state;
}

const startsWith = (...prefixes) => (event) => prefixes.some((p) => event.type.startsWith(p));

// ---- small pieces -----------------------------------------------------------------

function useNow() {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);
  return now;
}

function span(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

/** "12 s ago" / "in 3 min", with the exact time on hover. */
function When({ at }) {
  const now = useNow();
  if (!at) return html`<span class="muted">–</span>`;
  const ms = Date.parse(at);
  const text = ms <= now ? `${span(now - ms)} ago` : `in ${span(ms - now)}`;
  return html`<time datetime=${at} title=${`${new Date(ms).toString()} (${at})`}>${text}</time>`;
}

function Loading({ state, children }) {
  if (state.error) return html`<p class="error" role="alert">${state.error}</p>`;
  if (state.loading) return html`<p class="muted">Loading…</p>`;
  return children(state.data);
}

function Json({ value }) {
  if (value === undefined || value === null) return html`<span class="muted">null</span>`;
  const text = JSON.stringify(value, null, 2);
  return text.length < 60 && !text.includes('\n') ? html`<code>${text}</code>` : html`<pre>${text}</pre>`;
}

// ---- pages ------------------------------------------------------------------------

function Agents() {
  const state = useData(() => call('ListAgents'), [], startsWith('agent.', 'lock.', 'node.', 'message.'));
  return html`<section class="panel" aria-labelledby="agents-title">
    <h2 id="agents-title">Agents</h2>
    <${Loading} state=${state}>${({ agents }) => agents.length === 0
      ? html`<p class="empty">No agent has joined. Agents join with RegisterAgent (baton_join in MCP).</p>`
      : html`<div class="scroll"><table>
        <thead><tr><th scope="col">Name</th><th scope="col">Role</th><th scope="col">Holds</th>
          <th scope="col">Unread</th><th scope="col">Joined</th><th scope="col">Last seen</th><th scope="col">Expires</th></tr></thead>
        <tbody>${agents.map((a) => html`<tr key=${a.name} data-agent=${a.name}>
          <th scope="row">${a.name}</th>
          <td>${a.role || html`<span class="muted">–</span>`}</td>
          <td>${a.locks.map((k) => html`<span class="tag">${k}</span>`)}
              ${a.nodes.map((n) => html`<span class="tag">node ${n.node_id}</span>`)}
              ${a.locks.length + a.nodes.length === 0 ? html`<span class="muted">nothing</span>` : ''}</td>
          <td>${a.unread}</td>
          <td><${When} at=${a.started_at} /></td>
          <td><${When} at=${a.last_seen} /></td>
          <td><${When} at=${a.expires_at} /></td>
        </tr>`)}</tbody></table></div>`}<//>
  </section>`;
}

/** Lock keys as a tree: `dir:` and `file:` keys by path under the workspace, the others
 * by their kind. */
function lockTree(locks, waiting) {
  const root = { name: '', children: new Map(), holders: [], waiters: [] };
  const place = (key) => {
    const colon = key.indexOf(':');
    const kind = colon < 0 ? '' : key.slice(0, colon);
    const rest = colon < 0 ? key : key.slice(colon + 1);
    const path = kind === 'file' || kind === 'dir'
      ? ['workspace', ...rest.split('/').filter(Boolean)]
      : [kind || 'other', rest];
    let node = root;
    for (const segment of path) {
      if (!node.children.has(segment)) {
        node.children.set(segment, { name: segment, children: new Map(), holders: [], waiters: [] });
      }
      node = node.children.get(segment);
    }
    node.key = key;
    return node;
  };
  for (const lock of locks) place(lock.resource_key).holders.push(lock);
  for (const waiter of waiting) place(waiter.resource_key).waiters.push(waiter);
  return root;
}

function LockNode({ node }) {
  const children = [...node.children.values()].sort((a, b) => a.name.localeCompare(b.name));
  return html`<li>
    <span class="seg" title=${node.key || ''}>${node.name}${children.length ? '/' : ''}</span>
    ${node.holders.map((h) => html`<span class="holder" data-holder=${h.owner}>
      <span class="tag">${h.mode || 'exclusive'}${h.slots ? ` · ${h.slots} slots` : ''}</span>
      held by <strong>${h.owner}</strong> since <${When} at=${h.acquired_at} />, until <${When} at=${h.expires_at} />
      <span class="muted">(fencing ${h.fencing_token})</span></span>`)}
    ${node.waiters.map((w) => html`<span class="waiter" data-waiter=${w.owner}>
      · ${w.owner} waits (${w.mode || 'exclusive'}${w.slots ? `, ${w.slots} slots` : ''})</span>`)}
    ${children.length ? html`<ul>${children.map((c) => html`<${LockNode} key=${c.name} node=${c} />`)}</ul>` : ''}
  </li>`;
}

function Locks() {
  const state = useData(() => call('ListResourceLocks'), [], startsWith('lock.', 'agent.'));
  return html`<section class="panel" aria-labelledby="locks-title">
    <h2 id="locks-title">Locks</h2>
    <${Loading} state=${state}>${({ locks, waiting = [] }) => locks.length + waiting.length === 0
      ? html`<p class="empty">No lock is held.</p>`
      : html`<ul class="tree">${[...lockTree(locks, waiting).children.values()].map((c) => html`<${LockNode} key=${c.name} node=${c} />`)}</ul>`}<//>
  </section>`;
}

/** Columns by depth (longest chain of dependencies), rows in order within a column. */
function layout(nodes) {
  const byId = new Map(nodes.map((n) => [n.node_id, n]));
  const depth = new Map();
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const deps = (byId.get(id)?.dependencies || []).filter((d) => byId.has(d));
    const d = deps.length ? 1 + Math.max(...deps.map((x) => depthOf(x, seen))) : 0;
    depth.set(id, d);
    return d;
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

function Dag({ nodes }) {
  const { at, width, height, W, H } = useMemo(() => layout(nodes), [nodes]);
  const edges = [];
  for (const n of nodes) {
    for (const d of n.dependencies || []) {
      const a = at.get(d), b = at.get(n.node_id);
      if (!a || !b) continue;
      const [x1, y1, x2, y2] = [a.x + W, a.y + H / 2, b.x, b.y + H / 2];
      edges.push(html`<path class="edge" d=${`M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}`} marker-end="url(#arrow)" />`);
    }
  }
  const label = (n) => (n.name || n.node_id).slice(0, 20);
  return html`<svg class="dag" viewBox=${`0 0 ${width} ${height}`} style=${`max-width:${width}px`} role="img"
      aria-label=${`The task's graph: ${nodes.length} nodes; the table below lists them`}>
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse">
      <path d="M 0 0 L 10 5 L 0 10 z" fill="#8a93a6" /></marker></defs>
    ${edges}
    ${nodes.map((n) => {
      const p = at.get(n.node_id);
      return html`<g data-node=${n.node_id} data-state=${n.state}>
        <title>${n.node_id}: ${n.state}</title>
        <rect class=${n.state} x=${p.x} y=${p.y} width=${W} height=${H} />
        <text x=${p.x + 8} y=${p.y + 15}>${label(n)}</text>
        <text x=${p.x + 8} y=${p.y + 29} class="muted">${n.state}</text></g>`;
    })}
  </svg>`;
}

function TaskDetail({ taskId }) {
  const state = useData(() => call('TaskStatus', { task_id: taskId }), [taskId],
    (e) => e.task_id === taskId || e.type.startsWith('task.'));
  return html`<${Loading} state=${state}>${({ task, counts, nodes }) => html`
    <h3>${task.goal} <span class="muted">(${task.status})</span></h3>
    <p class="muted">Task <code>${task.task_id}</code>, created <${When} at=${task.created_at} />.
      ${Object.entries(counts).filter(([, n]) => n).map(([s, n]) => html` <span class=${`state ${s}`}>${n} ${s}</span>`)}</p>
    <${Dag} nodes=${nodes} />
    <div class="scroll"><table>
      <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">Attempt</th>
        <th scope="col">Worker</th><th scope="col">Result or error</th></tr></thead>
      <tbody>${nodes.map((n) => html`<tr key=${n.node_id} data-node-row=${n.node_id}>
        <th scope="row">${n.name || n.node_id}${n.name && n.name !== n.node_id ? html` <span class="muted">${n.node_id}</span>` : ''}</th>
        <td><span class=${`state ${n.state}`}>${n.state}</span></td>
        <td>${n.attempt ?? n.attempts ?? ''}${n.max_attempts ? ` of ${n.max_attempts}` : ''}</td>
        <td>${n.lease_owner || html`<span class="muted">–</span>`}
          ${n.lease_expires_at ? html` until <${When} at=${n.lease_expires_at} />` : ''}</td>
        <td>${n.error != null ? html`<span class="error"><${Json} value=${n.error} /></span>` : html`<${Json} value=${n.result} />`}</td>
      </tr>`)}</tbody></table></div>`}<//>`;
}

function Tasks({ arg }) {
  const state = useData(() => call('ListTasks', { limit: 100 }), [], startsWith('task.', 'node.'));
  const choose = (id) => { location.hash = `#/tasks/${encodeURIComponent(id)}`; };
  return html`<section class="panel" aria-labelledby="tasks-title">
    <h2 id="tasks-title">Tasks</h2>
    <${Loading} state=${state}>${({ tasks }) => tasks.length === 0
      ? html`<p class="empty">No task is registered.</p>`
      : html`<div class="tasks">
        <ul class="list">${tasks.map((t) => html`<li key=${t.task_id}>
          <button type="button" aria-pressed=${String(t.task_id === arg)} onClick=${() => choose(t.task_id)}>
            <strong>${t.goal}</strong><br /><span class="muted">${t.status} · <${When} at=${t.created_at} /></span>
          </button></li>`)}</ul>
        <div>${arg ? html`<${TaskDetail} taskId=${arg} />` : html`<p class="muted">Choose a task to see its graph.</p>`}</div>
      </div>`}<//>
  </section>`;
}

function matches(event, type, text) {
  if (type && !event.type.startsWith(type)) return false;
  if (!text) return true;
  return [event.namespace, event.key, event.resource_key, event.task_id, event.node_id, event.actor]
    .some((field) => field && String(field).includes(text));
}

function Journal() {
  const live = useFeed();
  const [type, setType] = useState('');
  const [text, setText] = useState('');
  const [pausedAt, setPausedAt] = useState(null);
  const shown = pausedAt === null ? live.events : live.events.slice(0, pausedAt);
  const waiting = pausedAt === null ? 0 : live.events.length - pausedAt;
  const rows = shown.filter((e) => matches(e, type, text)).slice(-300).reverse();
  return html`<section class="panel journal-page" aria-labelledby="journal-title">
    <h2 id="journal-title">Journal</h2>
    <div class="toolbar">
      <label>Type starts with<input value=${type} onInput=${(e) => setType(e.target.value)} placeholder="lock." /></label>
      <label>Key, task or actor contains<input value=${text} onInput=${(e) => setText(e.target.value)} /></label>
      <button type="button" class="secondary" aria-pressed=${String(pausedAt !== null)}
        onClick=${() => setPausedAt(pausedAt === null ? live.events.length : null)}>
        ${pausedAt === null ? 'Pause' : `Resume (${waiting} new)`}</button>
    </div>
    <div class="journal" aria-live=${pausedAt === null ? 'polite' : 'off'}>
      ${rows.length === 0 ? html`<p class="empty">No event yet${type || text ? ' matches the filters' : ''}.</p>` : ''}
      <ol>${rows.map((e) => html`<li key=${e.seq} data-seq=${e.seq}>
        <span class="seq">#${e.seq}</span><span class="type">${e.type}</span>
        <${When} at=${e.at} />
        ${e.actor ? html` · <strong>${e.actor}</strong>` : ''}
        ${e.resource_key ? html` · ${e.resource_key}` : ''}
        ${e.namespace ? html` · ${e.namespace}/${e.key}` : ''}
        ${e.task_id ? html` · task ${e.task_id.slice(0, 8)}${e.node_id ? `/${e.node_id}` : ''}` : ''}
        ${e.data && Object.keys(e.data).length ? html` <code>${JSON.stringify(e.data).slice(0, 200)}</code>` : ''}
      </li>`)}</ol>
    </div>
  </section>`;
}

function History({ namespace, keyName }) {
  const state = useData(() => call('History', { namespace, key: keyName, limit: 50 }), [namespace, keyName],
    (e) => e.namespace === namespace && e.key === keyName);
  return html`<h3>History of <code>${keyName}</code></h3>
    <${Loading} state=${state}>${({ history }) => html`<div class="scroll"><table>
      <thead><tr><th scope="col">Version</th><th scope="col">When</th><th scope="col">By</th><th scope="col">Value</th></tr></thead>
      <tbody>${history.map((h) => html`<tr key=${h.version} data-version=${h.version}>
        <th scope="row">${h.version}</th><td><${When} at=${h.updated_at} /></td>
        <td>${h.updated_by || html`<span class="muted">–</span>`}</td>
        <td>${h.deleted ? html`<em>deleted</em>` : html`<${Json} value=${h.value} />`}</td></tr>`)}</tbody>
    </table></div>`}<//>`;
}

function Keys({ arg }) {
  const slash = arg.indexOf('/');
  const namespace = slash < 0 ? arg : arg.slice(0, slash);
  const keyName = slash < 0 ? '' : arg.slice(slash + 1);
  const [draft, setDraft] = useState(namespace);
  const live = useFeed();
  const seen = [...new Set(live.events.filter((e) => e.namespace).map((e) => e.namespace))].sort();
  const state = useData(() => (namespace ? call('List', { namespace, limit: 500 }) : Promise.resolve(null)),
    [namespace], (e) => e.namespace === namespace);
  const go = (ns, key = '') => {
    location.hash = `#/keys/${encodeURIComponent(ns)}${key ? `/${encodeURIComponent(key)}` : ''}`;
  };
  return html`<section class="panel" aria-labelledby="keys-title">
    <h2 id="keys-title">Keys</h2>
    <form class="toolbar" onSubmit=${(e) => { e.preventDefault(); go(draft); }}>
      <label>Namespace<input list="namespaces" value=${draft} onInput=${(e) => setDraft(e.target.value)} required /></label>
      <datalist id="namespaces">${seen.map((ns) => html`<option value=${ns} />`)}</datalist>
      <button type="submit">Show</button>
    </form>
    ${namespace ? html`<${Loading} state=${state}>${(data) => !data ? html`<p class="muted">Loading…</p>` : data.records.length === 0
      ? html`<p class="empty">No live key in <code>${namespace}</code>.</p>`
      : html`<div class="scroll"><table>
        <thead><tr><th scope="col">Key</th><th scope="col">Version</th><th scope="col">Updated</th><th scope="col">By</th><th scope="col">Value</th></tr></thead>
        <tbody>${data.records.map((r) => html`<tr key=${r.key} data-key=${r.key}>
          <th scope="row"><a href=${`#/keys/${encodeURIComponent(namespace)}/${encodeURIComponent(r.key)}`}>${r.key}</a></th>
          <td>${r.version}</td><td><${When} at=${r.updated_at} /></td>
          <td>${r.updated_by || html`<span class="muted">–</span>`}</td><td><${Json} value=${r.value} /></td></tr>`)}</tbody>
      </table></div>`}<//>` : html`<p class="muted">Name a namespace${seen.length ? ' (the journal has shown ' + seen.join(', ') + ')' : ''}.</p>`}
    ${namespace && keyName ? html`<${History} namespace=${namespace} keyName=${keyName} />` : ''}
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

function App() {
  const [where, setWhere] = useState(route());
  const [health, setHealth] = useState(null);
  const live = useFeed();
  useEffect(() => {
    const changed = () => setWhere(route());
    addEventListener('hashchange', changed);
    call('Health').then(setHealth, () => {});
    return () => removeEventListener('hashchange', changed);
  }, []);
  const Page = PAGES.find(([p]) => p === where.page)[2];
  return html`
    <header>
      <h1>Baton</h1>
      <nav aria-label="Pages"><ul>${PAGES.map(([p, title]) => html`<li><a href=${`#/${p}`}
        aria-current=${p === where.page ? 'page' : undefined}>${title}</a></li>`)}</ul></nav>
      <span class="live" role="status"><span class=${`dot ${live.status === 'live' ? 'on' : 'off'}`}></span>
        ${live.status === 'live' ? 'live' : live.status}${health ? ` · ${health.backend || ''} · v${health.version}` : ''}</span>
    </header>
    <main id="main"><${Page} arg=${where.arg} /></main>`;
}

follow();
const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
