// The kubewasm web view. Everything arrives by server-sent events from
// /ui/events (a `state` event every second, `feed` batches at most every
// 100 ms); the cache browser asks /ui/api/objects and /ui/api/object.
// Text derived from objects is only ever set as textContent.
'use strict';

const FEED_KEEP = 500; // rows kept in the table
const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k === 'title') e.title = v;
      else e.setAttribute(k, v);
    }
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const td = (text, cls) => el('td', { class: cls, text: text === undefined || text === null ? '' : String(text) });
const num = (n) => td(n === undefined || n === null ? '-' : Number(n).toLocaleString('en-US'), 'n');
function us(v) {
  if (v === undefined || v === null) return '-';
  if (v < 1000) return v.toFixed(v < 10 ? 1 : 0) + ' us';
  if (v < 1e6) return (v / 1000).toFixed(v < 1e4 ? 2 : 1) + ' ms';
  return (v / 1e6).toFixed(2) + ' s';
}
function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}
const objName = (ns, name) => (ns ? ns + '/' + name : name);

// ---- state: plugins, informers, dead letters ----

let informerIds = [];

function renderPlugins(plugins) {
  const body = $('plugins').tBodies[0];
  const rows = [];
  for (const p of plugins) {
    const tr = el('tr', { 'data-plugin': p.name, 'data-state': p.state },
      td(p.name),
      td(p.language || '-'),
      el('td', null, el('code', { text: p.version || '-' })),
      td(p.state, 'state state-' + p.state),
      td((p.subscriptions || []).join('; ')),
      td(p.rate === undefined ? '-' : p.rate.toFixed(1), 'n'),
      num(p.delivered),
      td(us(p.callP50Us), 'n'),
      td(us(p.callP99Us), 'n'),
      num(p.errors),
      num(p.retries),
      num(p.queue),
      num(p.delayed),
      num(p.deadLetters));
    rows.push(tr);
    if (p.error) {
      rows.push(el('tr', { class: 'error', 'data-error-of': p.name },
        el('td', { colspan: '14', text: (p.state === 'serving' || p.state === 'unhealthy'
          ? 'its new file did not load (the previous version serves): ' : '') + p.error })));
    }
  }
  if (!plugins.length) rows.push(el('tr', null, el('td', { colspan: '14', class: 'muted', text: 'no plugin in the folder' })));
  body.replaceChildren(...rows);
  $('plugin-names').replaceChildren(...plugins.map((p) => el('option', { value: p.name })));
}

function renderInformers(informers) {
  const body = $('informers').tBodies[0];
  const rows = [];
  for (const i of informers) {
    rows.push(el('tr', { 'data-informer': i.id },
      td(i.kind),
      td(i.scope),
      num(i.objects),
      td(bytes(i.bytes), 'n'),
      td(i.forbidden ? 'forbidden: ' + i.forbidden : (i.synced ? 'yes' : 'no'), i.forbidden ? 'err' : undefined),
      el('td', null, el('code', { text: i.resourceVersion || '-' })),
      num(i.watchRestarts),
      num(i.relists),
      td((i.plugins || []).join(', '))));
    // Objects it cannot decode: the cache holds their last decoded state.
    for (const u of i.undecodable || []) {
      rows.push(el('tr', { class: 'error', 'data-undecodable-of': i.id },
        el('td', { colspan: '9', text: 'cannot decode ' + (u.object || 'an object whose name is unreadable')
          + ' (cached as last decoded, if at all): ' + u.error })));
    }
  }
  body.replaceChildren(...rows);
  const ids = informers.map((i) => i.id);
  if (ids.join('\n') !== informerIds.join('\n')) {
    informerIds = ids;
    const sel = $('cache-informer');
    const current = sel.value;
    sel.replaceChildren(...informers.map((i) => el('option', { value: i.id, text: i.id + ' (' + i.objects + ')' })));
    if (ids.includes(current)) sel.value = current;
  } else {
    // Counts in the labels follow the cache.
    for (const [n, i] of informers.entries()) {
      const opt = $('cache-informer').options[n];
      if (opt) opt.textContent = i.id + ' (' + i.objects + ')';
    }
  }
}

function renderDead(letters) {
  const body = $('dead-letters').tBodies[0];
  if (!letters.length) {
    body.replaceChildren(el('tr', null, el('td', { colspan: '8', class: 'muted', text: 'none' })));
    return;
  }
  body.replaceChildren(...letters.map((d) => el('tr', { 'data-plugin': d.plugin },
    td(d.plugin), td(d.kind), td(objName(d.namespace, d.name)), td(d.delta), num(d.attempts),
    td(d.firstFailed), td(d.lastFailed), td(d.lastError, 'err'))));
}

// Which replica leads: a follower delivers nothing, so its page says so
// and names the leader (a port-forward may land on either replica).
function renderShards(sh) {
  const role = $('role');
  const banner = $('follower');
  const held = sh.held || [];
  role.hidden = false;
  role.textContent = held.length ? 'shards ' + held.join(', ') + ' of ' + sh.count : 'no shard';
  role.className = 'badge ' + (held.length ? 'ok' : 'off');
  role.title = 'This replica acts for the objects of ' + (held.length ? 'shards ' + held.join(', ') : 'no shard') + ' of ' + sh.count + ' (kubewasm shards shows every holder)';
  banner.hidden = held.length > 0;
  banner.textContent = held.length ? '' : 'This replica holds no shard: it delivers nothing and executes nothing until it takes one (kubewasm shards shows which replica holds each).';
}

function renderLeadership(l) {
  const role = $('role');
  const banner = $('follower');
  if (!l) {
    role.hidden = true;
    banner.hidden = true;
    return;
  }
  role.hidden = false;
  role.textContent = l.leading ? 'leader' : 'follower';
  role.className = 'badge ' + (l.leading ? 'ok' : 'off');
  role.title = (l.holder ? l.holder + ' leads' : 'no holder') + (l.since ? ' since ' + l.since : '') + ' (Lease ' + l.lease + ')';
  banner.hidden = l.leading;
  banner.textContent = l.leading ? '' : (l.holder
    ? 'This replica (' + l.identity + ') is a follower: it delivers nothing and executes nothing. ' + l.holder + ' leads' + (l.since ? ' since ' + l.since : '') + '; open the web view of that replica to see deliveries.'
    : 'This replica (' + l.identity + ') is a follower: no replica holds Lease ' + l.lease + ' now.');
}

function renderState(s) {
  renderPlugins(s.plugins || []);
  renderInformers(s.informers || []);
  renderDead(s.deadLetters || []);
  const ready = $('ready');
  const notReady = s.notReady || [];
  ready.textContent = notReady.length ? 'not ready' : 'ready';
  ready.className = 'badge ' + (notReady.length ? 'off' : 'ok');
  ready.title = notReady.join('\n');
  if (s.shards) {
    renderShards(s.shards);
  } else {
    renderLeadership(s.leadership);
  }
  const notes = s.notes || [];
  $('notes').hidden = notes.length === 0;
  $('notes').textContent = notes.join('\n');
  $('pages').textContent = s.pages + (s.pages === 1 ? ' page open' : ' pages open');
}

// ---- the feed ----

let paused = false;
let pausedRows = 0;
let shown = 0;
let matched = 0;
let dropped = 0;
let unsampled = 0;

function feedStats() {
  let t = 'shown ' + shown.toLocaleString('en-US') + ' of ' + matched.toLocaleString('en-US') + ' matching';
  if (dropped) t += '; ' + dropped.toLocaleString('en-US') + ' sampled out by the server';
  if (unsampled) t += '; ' + unsampled.toLocaleString('en-US') + ' more (any plugin) not recorded: over 2,000 rows/s';
  if (paused) t += '; paused (' + pausedRows.toLocaleString('en-US') + ' not shown)';
  $('feed-stats').textContent = t;
}

const pad = (n, w) => String(n).padStart(w, '0');
// Local time with milliseconds; by hand, since an Intl formatter per row is
// a measurable part of a frame at hundreds of rows a second.
function clock(t) {
  const d = new Date(t);
  return pad(d.getHours(), 2) + ':' + pad(d.getMinutes(), 2) + ':' + pad(d.getSeconds(), 2) + '.' + pad(d.getMilliseconds(), 3);
}

const cell = (text, cls) => el('span', { role: 'cell', class: cls, text: text === undefined || text === null ? '' : String(text) });

function feedRow(r) {
  return el('div', { role: 'row', class: 'feed-row', 'data-plugin': r.plugin, 'data-kind': r.kind, 'data-namespace': r.namespace || '', 'data-name': r.name, 'data-t': String(r.t) },
    cell(clock(r.t)),
    cell(r.plugin),
    cell(r.row),
    cell(r.kind),
    cell(r.name ? objName(r.namespace, r.name) : '-'),
    cell(r.what),
    cell(r.outcome, 'outcome-' + r.outcome),
    cell(us(r.us), 'n'),
    cell(r.error || '', 'err'));
}

// Rows received since the table was last touched, oldest first. The page
// touches the table at most five times a second, in an animation frame,
// however many batches arrived: a click or a repaint must not queue behind
// table updates, and nobody reads a feed faster than that.
const FEED_EVERY_MS = 200;
let pending = [];
let flushing = false;
let lastFlush = 0;

function onFeed(batch) {
  matched += batch.matched;
  dropped += batch.dropped;
  unsampled += batch.unsampled;
  if (paused) pausedRows += batch.rows.length;
  else for (const r of batch.rows) pending.push(r);
  // A hidden tab runs no animation frame: keep what the table would keep
  // (the rest would have scrolled through it), not everything since.
  if (pending.length > 2 * FEED_KEEP) {
    const gone = pending.length - FEED_KEEP;
    pending.splice(0, gone);
    shown += gone;
  }
  if (!flushing) {
    flushing = true;
    const wait = Math.max(0, lastFlush + FEED_EVERY_MS - performance.now());
    setTimeout(() => requestAnimationFrame(flushFeed), wait);
  }
}

function flushFeed() {
  flushing = false;
  lastFlush = performance.now();
  if (pending.length) {
    const rows = pending;
    pending = [];
    shown += rows.length;
    // Rows that would be pushed out in the same frame are never built.
    const first = Math.max(0, rows.length - FEED_KEEP);
    const body = $('feed-rows');
    const frag = document.createDocumentFragment();
    for (let i = rows.length - 1; i >= first; i--) frag.append(feedRow(rows[i]));
    body.prepend(frag);
    for (let extra = body.childElementCount - FEED_KEEP; extra > 0; extra--) body.lastElementChild.remove();
  }
  feedStats();
}

// ---- the stream ----

let source = null;

function filterQuery() {
  const q = new URLSearchParams();
  for (const [k, id] of [['plugin', 'feed-plugin'], ['kind', 'feed-kind'], ['namespace', 'feed-namespace']]) {
    const v = $(id).value.trim();
    if (v) q.set(k, v);
  }
  return q.toString();
}

function connect() {
  if (source) source.close();
  const q = filterQuery();
  source = new EventSource('/ui/events' + (q ? '?' + q : ''));
  source.addEventListener('open', () => {
    // The filter this stream applies (the tests wait for it).
    $('feed-section').dataset.filter = q;
    $('conn').textContent = 'live';
    $('conn').className = 'badge ok';
  });
  source.addEventListener('error', () => {
    $('conn').textContent = 'disconnected (retrying)';
    $('conn').className = 'badge bad';
  });
  source.addEventListener('state', (e) => renderState(JSON.parse(e.data)));
  source.addEventListener('feed', (e) => onFeed(JSON.parse(e.data)));
}

let refilter = null;
function onFilterChange() {
  clearTimeout(refilter);
  refilter = setTimeout(() => {
    $('feed-rows').replaceChildren();
    pending = [];
    shown = matched = dropped = unsampled = pausedRows = 0;
    feedStats();
    connect();
  }, 250);
}

// ---- the cache browser ----

let cacheNext = null;

async function listObjects(more) {
  const informer = $('cache-informer').value;
  if (!informer) return;
  const q = new URLSearchParams({ informer });
  const ns = $('cache-namespace').value.trim();
  const sel = $('cache-selector').value.trim();
  if (ns) q.set('namespace', ns);
  if (sel) q.set('selector', sel);
  if (more && cacheNext) q.set('after', cacheNext);
  const res = await fetch('/ui/api/objects?' + q.toString());
  const body = await res.json();
  const list = $('cache-list');
  if (!more) list.replaceChildren();
  if (!res.ok) {
    $('cache-stats').textContent = body.error || res.statusText;
    $('cache-more').hidden = true;
    return;
  }
  for (const o of body.items) {
    const li = el('li', { 'data-namespace': o.namespace || '', 'data-name': o.name, title: 'resourceVersion ' + o.resourceVersion, text: objName(o.namespace, o.name) });
    li.addEventListener('click', () => showObject(informer, o.namespace, o.name, li));
    list.append(li);
  }
  cacheNext = body.next || null;
  $('cache-more').hidden = !cacheNext;
  $('cache-stats').textContent = body.matched + ' matching of ' + body.cached + ' cached';
}

async function showObject(informer, ns, name, li) {
  for (const s of document.querySelectorAll('#cache-list li.sel')) s.classList.remove('sel');
  li.classList.add('sel');
  const q = new URLSearchParams({ informer, name });
  if (ns) q.set('namespace', ns);
  const res = await fetch('/ui/api/object?' + q.toString());
  const text = await res.text();
  const pre = $('cache-object');
  pre.className = '';
  try {
    pre.textContent = JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    pre.textContent = text;
  }
}

document.addEventListener('DOMContentLoaded', () => {
  for (const id of ['feed-plugin', 'feed-kind', 'feed-namespace']) $(id).addEventListener('input', onFilterChange);
  $('feed-filter').addEventListener('submit', (e) => e.preventDefault());
  $('pause').addEventListener('click', () => {
    paused = !paused;
    $('pause').textContent = paused ? 'Resume' : 'Pause';
    if (paused) {
      // What arrived since the last frame is held, like what follows.
      pausedRows += pending.length;
      pending = [];
    } else pausedRows = 0;
    feedStats();
  });
  $('cache-filter').addEventListener('submit', (e) => { e.preventDefault(); listObjects(false); });
  $('cache-informer').addEventListener('change', () => listObjects(false));
  $('cache-more').addEventListener('click', () => listObjects(true));
  feedStats();
  connect();
});
