// A fake kubewasm host for unit tests of a plugin with `node --test`,
// natively: no WebAssembly, no componentize, no kubewasm binary, no cluster.
//
// Importing this module registers a module-resolution hook (fake-hooks.js)
// under which the WIT imports the SDK reads (`kubewasm:plugin/cache@0.2.0`,
// ...) resolve to fake-imports.js, answered by the current FakeHost. Import
// it first, then the plugin dynamically (static imports resolve before any
// code runs):
//
//   import { test } from 'node:test';
//   import assert from 'node:assert/strict';
//   import { FakeHost } from './sdk/fake.js';
//   const { handler } = await import('./index.js');
//
//   test('annotates', () => {
//     const host = new FakeHost();
//     host.load(handler, 'hello');
//     host.handle(host.added({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'greeting', namespace: 'demo' } }));
//     assert.deepEqual(host.takeActionLines(), [
//       'patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"hello"}}} uid=uid-demo-greeting',
//     ]);
//   });
//
// Values are shaped as in a component built by componentize-qjs (the
// default engine): WIT options are `null`, 64-bit integers numbers, errors
// thrown as their WIT variant. What it does as the host does: objects are
// snapshots behind handles (the SDK disposes them when `handle` returns;
// `liveHandles()` counts the rest); `cache.list` sorts by namespace then
// name and filters with a port of the host's label-selector parser
// (checked against the same apimachinery golden cases); `toJson` strips
// managedFields and the last-applied annotation; field values are typed
// as the host types them. After `load` the registration is enforced:
// reading a kind not subscribed to is `not-subscribed`, writing one not
// declared `not-declared`, `cache.byIndex` answers declared indexes only.
// Actions must be well formed (`invalid`), and `handle` drops the actions
// of a call that throws. Not faked: the sidecar's access list, executing
// actions (the cache changes only when the test changes it), retries, time
// passing.

import { register } from 'node:module';
import { Selector } from './fake-selector.js';

register('./fake-hooks.js', import.meta.url);

/** Where a FakeHost's clock starts: 2026-01-01T00:00:00Z, in ms. */
export const DEFAULT_NOW = Date.UTC(2026, 0, 1);

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';
const symbolDispose = Symbol.dispose || Symbol.for('dispose');
let current = null;

/** The current FakeHost (the one created last); throws when there is none. */
export function currentHost() {
  if (current === null) throw new Error('kubewasm fake host: a host call with no FakeHost: create one first (new FakeHost())');
  return current;
}

const meta = (o) => (o != null && typeof o.metadata === 'object' && o.metadata !== null ? o.metadata : {});
const compact = (v) => JSON.stringify(v);
const keyText = (ns, name) => (ns ? `${ns}/${name}` : name);
const clone = (v) => JSON.parse(JSON.stringify(v));

function gvkOf(o) {
  const av = typeof o.apiVersion === 'string' ? o.apiVersion : '';
  const slash = av.indexOf('/');
  return {
    group: slash < 0 ? '' : av.slice(0, slash),
    version: slash < 0 ? av : av.slice(slash + 1),
    kind: typeof o.kind === 'string' ? o.kind : '',
  };
}

function pairs(o, which) {
  const m = meta(o)[which];
  if (m == null || typeof m !== 'object') return [];
  return Object.entries(m).filter(([, v]) => typeof v === 'string').sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function owners(o) {
  const refs = Array.isArray(meta(o).ownerReferences) ? meta(o).ownerReferences : [];
  return refs.filter((r) => r !== null && typeof r === 'object').map((r) => ({
    apiVersion: r.apiVersion ?? '', kind: r.kind ?? '', name: r.name ?? '', uid: r.uid ?? '',
    controller: r.controller === true, blockOwnerDeletion: r.blockOwnerDeletion === true,
  }));
}

function fieldValue(v) {
  if (v === null) return { tag: 'null' };
  if (typeof v === 'boolean') return { tag: 'boolean', val: v };
  if (typeof v === 'number') return Number.isInteger(v) ? { tag: 'integer', val: v } : { tag: 'float', val: v };
  if (typeof v === 'string') return { tag: 'text', val: v };
  return { tag: 'json', val: compact(v) };
}

// RFC 6901; a `*` segment iterates an array when `star`.
function at(o, pointer, star = false) {
  if (pointer === '') return [o];
  if (!pointer.startsWith('/')) return [];
  let found = [o];
  for (let seg of pointer.slice(1).split('/')) {
    seg = seg.replaceAll('~1', '/').replaceAll('~0', '~');
    const next = [];
    for (const v of found) {
      if (Array.isArray(v)) {
        if (star && seg === '*') next.push(...v);
        else if (/^(0|[1-9][0-9]*)$/.test(seg) && Number(seg) < v.length) next.push(v[Number(seg)]);
      } else if (v !== null && typeof v === 'object' && Object.hasOwn(v, seg)) {
        next.push(v[seg]);
      }
    }
    found = next;
  }
  return found;
}

const indexKey = (v) => (typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : undefined);

function plural(kind) {
  const low = kind.toLowerCase();
  if (low.endsWith('y') && low.length > 1 && !'aeiou'.includes(low[low.length - 2])) return `${low.slice(0, -1)}ies`;
  if (['s', 'x', 'ch', 'sh'].some((s) => low.endsWith(s))) return `${low}es`;
  return `${low}s`;
}

// Whether a kind-ref names objects of gvk (group and kind, any version);
// resource names resolve without discovery.
function names(kind, gvk) {
  if (kind.tag === 'gvk') return kind.val.group === gvk.group && kind.val.kind === gvk.kind;
  const dot = kind.val.indexOf('.');
  const res = dot < 0 ? kind.val : kind.val.slice(0, dot);
  const group = dot < 0 ? '' : kind.val.slice(dot + 1);
  if (res !== plural(gvk.kind) && res !== gvk.kind.toLowerCase()) return false;
  if (group === '' || group === gvk.group || (group === gvk.version && gvk.group === '')) return true;
  const d2 = group.indexOf('.');
  return d2 >= 0 && group.slice(0, d2) === gvk.version && group.slice(d2 + 1) === gvk.group;
}

function sameKind(a, b) {
  if (a.tag === 'gvk') return names(b, a.val);
  if (b.tag === 'gvk') return names(a, b.val);
  return a.val === b.val;
}

function describe(kind) {
  if (kind.tag !== 'gvk') return kind.val;
  return kind.val.group ? `${kind.val.group}/${kind.val.version}/${kind.val.kind}` : `${kind.val.version}/${kind.val.kind}`;
}

const kindName = (kind) => (kind.tag === 'gvk' ? kind.val.kind : kind.val);

function objectKey(o) {
  const g = gvkOf(o);
  const name = meta(o).name;
  if (!g.kind || !g.version || typeof name !== 'string' || name === '') {
    throw new Error(`kubewasm fake host: objects need apiVersion, kind and metadata.name, got ${compact(o)}`);
  }
  return compact([g.group, g.kind, meta(o).namespace || '', name]);
}

function decode(obj) {
  const o = typeof obj === 'string' ? JSON.parse(obj) : clone(obj);
  if (o === null || typeof o !== 'object' || Array.isArray(o)) throw new Error(`kubewasm fake host: an object must be a JSON object, got ${obj}`);
  return o;
}

/** An object handle: a snapshot of one object the fake holds. */
class FakeObject {
  #o;
  #host;

  constructor(host, o) {
    this.#o = o;
    this.#host = host;
    host.handles.add(this);
  }

  #live() {
    if (!this.#host.handles.has(this)) throw new Error('kubewasm fake host: object used after it was dropped');
    return this.#o;
  }

  kind() { return gvkOf(this.#live()); }
  namespace() { return meta(this.#live()).namespace || null; }
  name() { return meta(this.#live()).name ?? ''; }
  uid() { return meta(this.#live()).uid ?? ''; }
  resourceVersion() { return meta(this.#live()).resourceVersion ?? ''; }
  generation() { const g = meta(this.#live()).generation; return Number.isInteger(g) ? g : null; }
  label(key) { return Object.fromEntries(this.labels())[key] ?? null; }
  labels() { return pairs(this.#live(), 'labels'); }
  annotation(key) { return Object.fromEntries(this.annotations())[key] ?? null; }
  annotations() { return pairs(this.#live(), 'annotations'); }
  ownerReferences() { return owners(this.#live()); }
  controller() { return owners(this.#live()).find((r) => r.controller) ?? null; }
  finalizers() { const f = meta(this.#live()).finalizers; return Array.isArray(f) ? f.filter((x) => typeof x === 'string') : []; }
  deletionTimestamp() { return meta(this.#live()).deletionTimestamp ?? null; }

  meta() {
    const m = meta(this.#live());
    return {
      apiVersion: this.#o.apiVersion ?? '', kind: this.#o.kind ?? '', namespace: this.namespace(), name: this.name(),
      uid: this.uid(), resourceVersion: this.resourceVersion(), generation: this.generation(), labels: this.labels(),
      annotations: this.annotations(), ownerReferences: this.ownerReferences(), finalizers: this.finalizers(),
      creationTimestamp: m.creationTimestamp ?? null, deletionTimestamp: m.deletionTimestamp ?? null,
    };
  }

  field(pointer) {
    const found = at(this.#live(), pointer);
    return found.length === 0 ? null : fieldValue(found[0]);
  }

  fields(pointers) { return pointers.map((p) => this.field(p)); }

  toJson() {
    const o = clone(this.#live());
    const m = o.metadata;
    if (m !== null && typeof m === 'object') {
      delete m.managedFields;
      const a = m.annotations;
      if (a !== null && typeof a === 'object' && Object.hasOwn(a, LAST_APPLIED)) {
        delete a[LAST_APPLIED];
        if (Object.keys(a).length === 0) delete m.annotations;
      }
    }
    return compact(o);
  }

  [symbolDispose]() { this.#host.handles.delete(this); }
}

function actionLine(a) {
  const pre = (p) => (p?.uid ? ` uid=${p.uid}` : '') + (p?.resourceVersion ? ` rv=${p.resourceVersion}` : '');
  switch (a.verb) {
    case 'apply':
    case 'apply-status':
      return `${a.verb} ${a.object.kind} ${keyText(meta(a.object).namespace, meta(a.object).name)}${a.force ? ' force' : ''}${pre(a.preconditions)}`;
    case 'patch':
      return `patch ${kindName(a.target.kind)} ${keyText(a.target.namespace, a.target.name)} ${a.patchType} ${compact(a.patch)}${pre(a.preconditions)}`;
    case 'delete':
      return `delete ${kindName(a.target.kind)} ${keyText(a.target.namespace, a.target.name)} ${a.propagation}${pre(a.preconditions)}`;
    default: {
      const e = a.event;
      const t = e.eventType === 'warning' ? 'Warning' : 'Normal';
      return `event ${kindName(e.regarding.kind)} ${keyText(e.regarding.namespace, e.regarding.name)} ${t} ${e.reason}: ${e.note}` +
        (e.regardingUid ? ` uid=${e.regardingUid}` : '');
    }
  }
}

/**
 * The current fake host: creating one makes it current. Starts empty: no
 * objects, no registration (nothing enforced until `load`), every log level
 * enabled, the clock at DEFAULT_NOW.
 */
export class FakeHost {
  constructor() {
    /** Cached objects by kind, namespace and name. */
    this.cache = new Map();
    /** Live object and selector handles. */
    this.handles = new Set();
    /**
     * Actions accepted so far, in order: `{verb, object, force, target,
     * patchType, patch, propagation, event, preconditions}` (`verb`:
     * `apply`, `apply-status`, `patch`, `delete`, `event`; `object` and
     * `patch` decoded).
     */
    this.actions = [];
    /** Records logged so far: `{level, message, fields}`. */
    this.logs = [];
    /** The clock, in ms since the epoch. */
    this.now = DEFAULT_NOW;
    /** Records below this level are neither enabled nor kept. */
    this.logLevel = 'trace';
    /** The registration of the plugin loaded last. */
    this.registration = null;
    this.handler = null;
    current = this;
  }

  // ---- the plugin ----

  /**
   * Registers the `handler` export (`definePlugin(...)`) as the host does,
   * with a context named `name` (version `000000000000`) and `config`
   * (JSON); the fake keeps and enforces the registration. A refused
   * registration throws an Error with the plugin's message.
   */
  load(handler, name = 'plugin', config = '{}') {
    try {
      this.registration = handler.register({ name, version: '000000000000', config });
    } catch (e) {
      throw new Error(typeof e === 'string' ? e : e?.message ?? String(e));
    }
    this.handler = handler;
    return this.registration;
  }

  /**
   * Hands `delta` to the loaded handler: returns the WIT `handled`
   * (`{tag: 'done'}` or `{tag: 'requeue-after', val: ms}`); a failure
   * throws an Error whose `tag` is `retry` or `permanent` and whose message
   * is the handler's, and the actions the call emitted are dropped, as the
   * host drops them.
   */
  handle(delta) {
    const mark = this.actions.length;
    try {
      return this.handler.handle(delta);
    } catch (e) {
      this.actions.length = mark;
      if (e !== null && typeof e === 'object' && (e.tag === 'retry' || e.tag === 'permanent')) {
        throw Object.assign(new Error(e.val), { tag: e.tag });
      }
      throw e;
    }
  }

  // ---- the cache ----

  /**
   * Puts an object (JSON text or an object with apiVersion, kind,
   * metadata.name and, if namespaced, metadata.namespace) into the cache,
   * replacing one of the same kind, namespace and name, and fills in what
   * the API server would: `metadata.uid` (`uid-NAMESPACE-NAME`, or the
   * replaced object's), `resourceVersion` (the replaced object's plus one,
   * or `1`), `creationTimestamp` (the clock). Returns the host.
   */
  put(obj) {
    this.#store(obj);
    return this;
  }

  #store(obj) {
    const o = decode(obj);
    const key = objectKey(o);
    const before = meta(this.cache.get(key));
    o.metadata ??= {};
    const m = o.metadata;
    if (!Object.hasOwn(m, 'uid')) m.uid = before.uid ?? (m.namespace ? `uid-${m.namespace}-${m.name}` : `uid-${m.name}`);
    if (!Object.hasOwn(m, 'resourceVersion')) {
      m.resourceVersion = /^[0-9]+$/.test(before.resourceVersion ?? '') ? String(BigInt(before.resourceVersion) + 1n) : '1';
    }
    if (!Object.hasOwn(m, 'creationTimestamp')) m.creationTimestamp = before.creationTimestamp ?? this.#rfc3339();
    this.cache.set(key, o);
    return o;
  }

  /** Removes the object (by kind, namespace and name); whether it was there. */
  remove(obj) {
    return this.cache.delete(objectKey(decode(obj)));
  }

  #sorted() {
    return [...this.cache.values()].sort((a, b) => {
      const ka = [meta(a).namespace || '', meta(a).name, gvkOf(a).group, gvkOf(a).kind];
      const kb = [meta(b).namespace || '', meta(b).name, gvkOf(b).group, gvkOf(b).kind];
      for (let i = 0; i < 4; i++) if (ka[i] !== kb[i]) return ka[i] < kb[i] ? -1 : 1;
      return 0;
    });
  }

  /** Every cached object, by namespace and name. */
  objects() {
    return this.#sorted();
  }

  // ---- deltas ----

  #delta(deltaType, o, old = null) {
    const gvk = gvkOf(o);
    const m = meta(o);
    const labels = new Map(pairs(o, 'labels'));
    let sub = 0;
    if (this.registration !== null) {
      let first = -1;
      let fit = -1;
      this.registration.subscriptions.forEach((s, i) => {
        if (fit >= 0 || !names(s.kind, gvk)) return;
        if (first < 0) first = i;
        if (s.namespace != null && s.namespace !== m.namespace) return;
        if (s.labelSelector != null) {
          try {
            if (!new Selector(s.labelSelector).matches((k) => labels.get(k))) return;
          } catch {
            return;
          }
        }
        if (deltaType === 'requeue' || s.deltas.includes(deltaType)) fit = i;
      });
      sub = fit >= 0 ? fit : Math.max(first, 0);
    }
    return {
      deltaType, subscription: sub, namespace: m.namespace || null, name: m.name ?? '', uid: m.uid ?? '',
      resourceVersion: m.resourceVersion ?? '', object: new FakeObject(this, o),
      oldObject: old === null ? null : new FakeObject(this, old), initial: false, finalStateUnknown: false,
      attempt: 1, lastFailure: null,
    };
  }

  /**
   * Puts `obj` and returns its `added` delta (for the first subscription
   * of its kind whose namespace, selector and delta types fit, else the
   * first of its kind, else 0). Set `initial`, `attempt`, `lastFailure` or
   * `subscription` on it as a test needs.
   */
  added(obj) { return this.#delta('added', this.#store(obj)); }

  /** Replaces the cached object and returns the `updated` delta, the cached one as its old state (throws when not cached). */
  updated(obj) {
    const o = decode(obj);
    const old = this.cache.get(objectKey(o));
    if (old === undefined) throw new Error(`kubewasm fake host: updated: ${objectKey(o)} is not in the cache: put it first`);
    return this.#delta('updated', this.#store(o), old);
  }

  /** Removes the object from the cache and returns its `deleted` delta, carrying the cached state (or `obj` when not cached). */
  deleted(obj) {
    const o = decode(obj);
    const key = objectKey(o);
    const last = this.cache.get(key) ?? o;
    this.cache.delete(key);
    return this.#delta('deleted', last);
  }

  /** Puts `obj` and returns its `resync` delta. */
  resync(obj) { return this.#delta('resync', this.#store(obj)); }

  /** Puts `obj` and returns its `requeue` delta. */
  requeue(obj) { return this.#delta('requeue', this.#store(obj)); }

  /** The `synced` delta of a subscription: no object. */
  synced(subscription = 0) {
    return {
      deltaType: 'synced', subscription, namespace: null, name: '', uid: '', resourceVersion: '', object: null,
      oldObject: null, initial: false, finalStateUnknown: false, attempt: 1, lastFailure: null,
    };
  }

  // ---- what the plugin did ----

  /** The actions accepted so far, in order; clears them. */
  takeActions() {
    const out = this.actions;
    this.actions = [];
    return out;
  }

  /**
   * `takeActions`, one line each, the same in every language's fake:
   * `apply ConfigMap team-a/settings force`, `patch ConfigMap
   * demo/greeting merge {...} uid=U`, `delete ConfigMap team-a/settings
   * background uid=U`, `event ConfigMap a/b Normal Reason: note uid=U`;
   * preconditions last. An apply's object is left out (see `object`).
   */
  takeActionLines() {
    return this.takeActions().map(actionLine);
  }

  /** The records logged so far (`info copy deleted copy=team-a/settings`, one line each); clears them. */
  takeLogLines() {
    const out = this.logs.map((l) => [l.level, l.message, ...l.fields.map(([k, v]) => `${k}=${v}`)].join(' '));
    this.logs = [];
    return out;
  }

  /** How many object and selector handles the plugin holds (the SDK disposes what `handle` read). */
  liveHandles() {
    return this.handles.size;
  }

  // ---- the clock ----

  /** Sets the clock to an RFC 3339 time (`2026-11-22T17:00:00Z`). */
  setTime(rfc3339) {
    const ms = Date.parse(rfc3339);
    if (Number.isNaN(ms)) throw new Error(`kubewasm fake host: setTime: ${rfc3339} is not RFC 3339`);
    this.now = ms;
  }

  /** Moves the clock forward by `ms` (as a test waits out a requeue). */
  advance(ms) {
    this.now += ms;
  }

  #rfc3339() {
    return new Date(Math.floor(this.now / 1000) * 1000).toISOString().replace('.000Z', 'Z');
  }

  // ---- the imports (fake-imports.js) ----

  #checkRead(kind) {
    if (this.registration !== null && !this.registration.subscriptions.some((s) => sameKind(s.kind, kind))) {
      throw { tag: 'not-subscribed', val: `${describe(kind)} is not among the plugin's subscriptions (subscribe to it, with no delta types to only read it)` };
    }
  }

  cacheGet(kind, namespace, name) {
    this.#checkRead(kind);
    const o = this.#sorted().find((x) => (meta(x).namespace || null) === (namespace ?? null) && meta(x).name === name && names(kind, gvkOf(x)));
    return o === undefined ? null : new FakeObject(this, o);
  }

  cacheList(kind, namespace, labelSelector) {
    this.#checkRead(kind);
    let sel;
    try {
      sel = new Selector(labelSelector ?? '');
    } catch (e) {
      throw { tag: 'invalid-selector', val: e.message };
    }
    return this.#sorted()
      .filter((o) => (namespace == null || (meta(o).namespace || '') === namespace) && names(kind, gvkOf(o)))
      .filter((o) => { const l = new Map(pairs(o, 'labels')); return sel.matches((k) => l.get(k)); })
      .map((o) => new FakeObject(this, o));
  }

  cacheByIndex(index, value) {
    const idx = (this.registration?.indexes ?? []).find((i) => i.name === index);
    if (idx === undefined) {
      throw { tag: 'unknown-index', val: `no index "${index}" was declared at registration (FakeHost.load registers the plugin)` };
    }
    return this.#sorted()
      .filter((o) => names(idx.kind, gvkOf(o)) && at(o, idx.pointer, true).some((v) => indexKey(v) === value))
      .map((o) => new FakeObject(this, o));
  }

  #checkWrite(kind) {
    if (this.registration !== null && !this.registration.writes.some((w) => sameKind(w, kind))) {
      throw { tag: 'not-declared', val: `${describe(kind)} is not among the registration's writes` };
    }
  }

  #pre(p) {
    return { uid: p?.uid ?? null, resourceVersion: p?.resourceVersion ?? null };
  }

  actApply(verb, objectJson, force, pre) {
    let o;
    try {
      o = JSON.parse(objectJson);
    } catch (e) {
      throw { tag: 'invalid', val: `the object is not JSON: ${e.message}` };
    }
    const g = o !== null && typeof o === 'object' ? gvkOf(o) : null;
    if (g === null || !g.version || !g.kind || !meta(o).name) {
      throw { tag: 'invalid', val: 'an applied object needs apiVersion, kind and metadata.name' };
    }
    this.#checkWrite({ tag: 'gvk', val: g });
    this.actions.push({ verb, object: o, force, preconditions: this.#pre(pre) });
  }

  actPatch(target, patchType, text, pre) {
    let p;
    try {
      p = JSON.parse(text);
    } catch (e) {
      throw { tag: 'invalid', val: `the patch is not JSON: ${e.message}` };
    }
    if (patchType === 'merge' && (p === null || typeof p !== 'object' || Array.isArray(p))) {
      throw { tag: 'invalid', val: 'a merge patch must be a JSON object' };
    }
    if (patchType === 'json' && !Array.isArray(p)) throw { tag: 'invalid', val: 'a JSON patch must be an array of operations' };
    this.#checkWrite(target.kind);
    this.actions.push({ verb: 'patch', target, patchType, patch: p, preconditions: this.#pre(pre) });
  }

  actDelete(target, propagation, pre) {
    this.#checkWrite(target.kind);
    this.actions.push({ verb: 'delete', target, propagation, preconditions: this.#pre(pre) });
  }

  actEvent(event) {
    if (!event.reason) throw { tag: 'invalid', val: 'an Event needs a reason' };
    this.actions.push({ verb: 'event', target: event.regarding, event });
  }

  logWrite(level, message, fields) {
    const levels = ['trace', 'debug', 'info', 'warn', 'error'];
    if (levels.indexOf(level) >= levels.indexOf(this.logLevel)) this.logs.push({ level, message, fields: [...fields] });
  }
}
