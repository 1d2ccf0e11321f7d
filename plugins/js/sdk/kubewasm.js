// kubewasm SDK for JavaScript plugins (componentize-js / jco).
//
// What every JS guest would otherwise write by hand around the raw WIT
// imports of `kubewasm:plugin@0.1.0`: kinds, registration builders, config
// parsing, metadata helpers, label selectors, cache reads and actions that
// turn refusals into permanent handler errors, logging, and `definePlugin`
// which produces the `handler` export.
//
//   import { definePlugin, kinds, subscription } from '../sdk/kubewasm.js';
//   export const handler = definePlugin(class { ... });

import * as rawCache from 'kubewasm:plugin/cache@0.1.0';
import * as rawActions from 'kubewasm:plugin/actions@0.1.0';
import * as rawLog from 'kubewasm:plugin/log@0.1.0';
import * as rawClock from 'kubewasm:plugin/clock@0.1.0';

export { Selector } from './selector.js';

// ---- kinds -----------------------------------------------------------------

/** A kind-ref by group/version/kind (`''` is the core group). */
export const gvk = (group, version, kind) => ({ tag: 'gvk', val: { group, version, kind } });
/** A kind-ref by kubectl resource name (`deployments.apps`). */
export const resource = (name) => ({ tag: 'resource-name', val: name });

export const kinds = {
  ConfigMap: gvk('', 'v1', 'ConfigMap'),
  Namespace: gvk('', 'v1', 'Namespace'),
  Node: gvk('', 'v1', 'Node'),
  Pod: gvk('', 'v1', 'Pod'),
  Secret: gvk('', 'v1', 'Secret'),
  Service: gvk('', 'v1', 'Service'),
  Deployment: gvk('apps', 'v1', 'Deployment'),
  ReplicaSet: gvk('apps', 'v1', 'ReplicaSet'),
};

/** Whether a delta's object is of `kindRef`'s group and kind (any version). */
export function isKind(delta, kindRef) {
  return delta.kind.group === kindRef.val.group && delta.kind.kind === kindRef.val.kind;
}

// ---- errors ----------------------------------------------------------------

/** A failure retrying will not fix: throw it from `handle`. */
export const permanent = (message) => ({ tag: 'permanent', val: String(message) });
/** A transient failure, retried with backoff: throw it from `handle`. */
export const retry = (message) => ({ tag: 'retry', val: String(message) });

const isHandlerError = (e) => e !== null && typeof e === 'object'
  && (e.tag === 'permanent' || e.tag === 'retry') && typeof e.val === 'string';
const message = (e) => (e instanceof Error ? e.message : String(e));
// jco throws a ComponentError whose `payload` is the WIT error variant.
const payload = (e) => (e && typeof e === 'object' && 'payload' in e ? e.payload : e);

// ---- registration ----------------------------------------------------------

export const DELTAS = ['added', 'updated', 'deleted', 'resync'];

/** A subscription record with defaults: all namespaces, object deltas. */
export function subscription(kind, opts = {}) {
  return {
    kind,
    namespace: opts.namespace,
    labelSelector: opts.labels,
    fieldSelector: opts.fieldSelector,
    deltas: opts.deltas ?? DELTAS,
    fields: opts.fields ?? [],
    resyncSeconds: opts.resyncSeconds,
  };
}

/** A registration record. */
export function registration({ subscriptions = [], writes = [], indexes = [] } = {}) {
  return { subscriptions, writes, indexes };
}

// ---- config ----------------------------------------------------------------

/**
 * Decodes the config JSON against `defaults`: an empty string or `null` is
 * `{}`, unknown keys and values of another type than the default are
 * errors (thrown as `invalid config: ...`).
 */
export function parseConfig(config, defaults) {
  let value;
  try {
    value = config.trim() === '' ? null : JSON.parse(config);
  } catch (e) {
    throw new Error(`invalid config: ${message(e)}`);
  }
  if (value === null) value = {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new Error('invalid config: expected an object');
  }
  const out = { ...defaults };
  for (const [k, v] of Object.entries(value)) {
    if (!(k in defaults)) {
      throw new Error(`invalid config: unknown field \`${k}\`, expected one of ${Object.keys(defaults).map((d) => `\`${d}\``).join(', ')}`);
    }
    if (typeof v !== typeof defaults[k] || v === null) {
      throw new Error(`invalid config: \`${k}\` must be a ${typeof defaults[k]}`);
    }
    out[k] = v;
  }
  return out;
}

// ---- metadata --------------------------------------------------------------
// WIT `option`s arrive as `undefined` (componentize-js) or `null` (QuickJS):
// test them with `== null`.

const lookup = (pairs, key) => {
  const found = pairs.find(([k]) => k === key);
  return found === undefined ? undefined : found[1];
};
export const label = (meta, key) => lookup(meta.labels, key);
export const annotation = (meta, key) => lookup(meta.annotations, key);
export const isTerminating = (meta) => meta.deletionTimestamp != null;
/** `namespace/name`, or `name` for cluster-scoped objects. */
export const key = (meta) => (meta.namespace != null ? `${meta.namespace}/${meta.name}` : meta.name);

/** `[meta, object]` of a delta that must carry one; else a permanent error. */
export function parts(delta) {
  if (delta.meta == null || delta.object == null) {
    throw permanent(`${delta.deltaType} delta for ${delta.kind.kind} carries no object`);
  }
  return [delta.meta, delta.object];
}

/** The previous state's metadata (`updated` deltas only). */
export const oldMeta = (delta) => (delta.oldObject == null ? undefined : delta.oldObject.meta());

/** A reference to the object `meta` describes, with its uid. */
export function objectRef(kind, meta) {
  return { kind, namespace: meta.namespace ?? undefined, name: meta.name, uid: meta.uid === '' ? undefined : meta.uid };
}

/** The value at `pointer` as a JS value (`undefined` when absent). */
export function fieldJson(object, pointer) {
  const v = object.field(pointer);
  if (v == null) return undefined;
  switch (v.tag) {
    case 'null': return null;
    case 'json':
      try {
        return JSON.parse(v.val);
      } catch (e) {
        throw permanent(`field ${pointer} is not valid JSON: ${message(e)}`);
      }
    default: return v.val;
  }
}

/** The string at `pointer`, or `undefined`. */
export function fieldStr(object, pointer) {
  const v = object.field(pointer);
  return v != null && v.tag === 'text' ? v.val : undefined;
}

// ---- resource lifetimes ----------------------------------------------------
// Objects (WIT resources) hold host handles; the engines drop them only
// when their garbage collector finalizes them, which may be never within a
// busy instance: the host's handle table then fills up and the call traps
// ("store handle limit exceeded"). The SDK disposes every object it handed
// out (cache reads, the delta's objects) when `handle` returns.
const symbolDispose = Symbol.dispose || Symbol.for('dispose');
let held = [];
const hold = (o) => {
  if (o != null) held.push(o);
  return o;
};
function release(delta) {
  const all = held;
  held = [];
  all.push(delta.object, delta.oldObject);
  for (const o of all) {
    if (o != null && typeof o[symbolDispose] === 'function') {
      try { o[symbolDispose](); } catch { /* already dropped */ }
    }
  }
}

// ---- cache -----------------------------------------------------------------

function cacheRefused(e) {
  const p = payload(e);
  const why = { 'not-subscribed': 'kind not subscribed', 'unknown-index': 'unknown index', 'invalid-selector': 'invalid selector' };
  if (p && why[p.tag]) return permanent(`cache read refused, ${why[p.tag]}: ${p.val}`);
  return permanent(`cache read failed: ${message(e)}`);
}

export const cache = {
  /** One object, or `undefined`. */
  get(kind, namespace, name) {
    try { return hold(rawCache.get(kind, namespace, name)); } catch (e) { throw cacheRefused(e); }
  },
  /** Objects of a kind, sorted by namespace then name. */
  list(kind, namespace, labelSelector) {
    try { return rawCache.list(kind, namespace, labelSelector).map(hold); } catch (e) { throw cacheRefused(e); }
  },
  byIndex(index, value) {
    try { return rawCache.byIndex(index, value).map(hold); } catch (e) { throw cacheRefused(e); }
  },
};

// ---- actions ---------------------------------------------------------------

function actionRefused(e) {
  const p = payload(e);
  if (p && p.tag === 'not-declared') return permanent(`action refused, kind not declared in writes: ${p.val}`);
  if (p && p.tag === 'invalid') return permanent(`action refused as invalid: ${p.val}`);
  return permanent(`action failed: ${message(e)}`);
}

const call = (f) => { try { f(); } catch (e) { throw actionRefused(e); } };

export const actions = {
  /** Server-side apply of an object (a JS value with apiVersion/kind/metadata). */
  apply(object, force = true) { call(() => rawActions.apply(JSON.stringify(object), force)); },
  applyStatus(object) { call(() => rawActions.applyStatus(JSON.stringify(object))); },
  patchMerge(target, patch) { call(() => rawActions.patch(target, 'merge', JSON.stringify(patch))); },
  patchJson(target, ops) { call(() => rawActions.patch(target, 'json', JSON.stringify(ops))); },
  /** Deletes an object; `propagation` is `background`, `foreground` or `orphan`. */
  delete(target, propagation = 'background') { call(() => rawActions.delete(target, propagation)); },
  event(regarding, eventType, reason, note) { call(() => rawActions.recordEvent(regarding, eventType, reason, note)); },
};

// ---- log and clock ---------------------------------------------------------

const write = (level) => (msg, fields = {}) => {
  if (rawLog.enabled(level)) rawLog.write(level, msg, Object.entries(fields).map(([k, v]) => [k, String(v)]));
};
export const log = {
  trace: write('trace'), debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error'),
};
export const clock = { now: () => rawClock.now(), nowRfc3339: () => rawClock.nowRfc3339() };

// ---- the export ------------------------------------------------------------

/**
 * Builds the `handler` export from a plugin class: `new Plugin(config)`
 * parses the config (throw to refuse the version), `registration()` returns
 * what `register` answers, `handle(delta)` handles one delta (throw
 * `permanent(..)` / `retry(..)`; any other exception is permanent). Objects
 * (the delta's, cache reads) are disposed when `handle` returns: do not
 * keep them across calls.
 */
export function definePlugin(Plugin) {
  let plugin = null;
  return {
    register(config) {
      try {
        const p = new Plugin(config);
        const r = p.registration();
        plugin = p;
        return r;
      } catch (e) {
        throw message(e);
      }
    },
    handle(delta) {
      if (plugin === null) throw permanent('handle called before register');
      try {
        plugin.handle(delta);
      } catch (e) {
        if (isHandlerError(e)) throw e;
        throw permanent(message(e));
      } finally {
        release(delta);
      }
    },
  };
}
