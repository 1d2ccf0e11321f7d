// kubewasm SDK for JavaScript plugins (componentize-js / jco, or QuickJS
// through componentize-qjs), on the WIT contract `kubewasm:plugin@0.2.0`
// (wit/v0.2.0/plugin.wit).
//
// What every JS guest would otherwise write by hand around the raw WIT
// imports: `definePlugin` (the `handler` export: context, registration,
// handled/requeue, retry/permanent errors, handle lifetimes), kinds,
// registration builders, config parsing, readers of the lazy `object`
// resource, label selectors (the host's), cache reads and actions that turn
// refusals into permanent handler errors, preconditions, JSON patches, owner
// references, finalizers, Events, logging and the clock.
//
//   import { definePlugin, kinds, subscription, registration } from './sdk/kubewasm.js';
//   export const handler = definePlugin(class {
//     constructor(ctx) { this.config = ctx.parseConfig({ greeting: 'hello' }); }
//     registration() { return registration({ subscriptions: [subscription(kinds.ConfigMap)] }); }
//     handle(delta) { /* return nothing (done), or requeueAfter(ms); throw retry(..) / permanent(..) */ }
//   });
//
// Every export carries its reference in JSDoc; `kubewasm.d.ts` declares the
// same API with types. WIT `option`s arrive as `undefined` (componentize-js)
// or `null` (QuickJS): the SDK tests them with `== null`, and its own
// readers return `undefined` for "absent". 64-bit integers (`s64`, `u64`)
// arrive as BigInt (componentize-js) or number (QuickJS).

import * as rawCache from 'kubewasm:plugin/cache@0.2.0';
import * as rawActions from 'kubewasm:plugin/actions@0.2.0';
import * as rawSelectors from 'kubewasm:plugin/selectors@0.2.0';
import * as rawLog from 'kubewasm:plugin/log@0.2.0';
import * as rawClock from 'kubewasm:plugin/clock@0.2.0';

/**
 * The raw WIT imports (`cache`, `actions`, `selectors`, `log`, `clock`), for
 * what the helpers do not cover. Their errors are thrown as the engine
 * throws them (componentize-js: an Error whose `payload` is the WIT error).
 */
export const raw = { cache: rawCache, actions: rawActions, selectors: rawSelectors, log: rawLog, clock: rawClock };

const absent = (v) => (v == null ? undefined : v);
const message = (e) => (e instanceof Error ? e.message : String(e));
// componentize-js throws a ComponentError whose `payload` is the WIT error;
// QuickJS throws the WIT error itself.
const payload = (e) => (e !== null && typeof e === 'object' && 'payload' in e ? e.payload : e);

// ---- kinds -----------------------------------------------------------------

/**
 * A kind-ref by group/version/kind (`''` is the core group):
 * `gvk('apps', 'v1', 'Deployment')`.
 */
export const gvk = (group, version, kind) => ({ tag: 'gvk', val: { group, version, kind } });

/**
 * A kind-ref by kubectl resource name (`pods`, `deployments.apps`,
 * `widgets.v1.example.com`), resolved by the host through discovery.
 */
export const resource = (name) => ({ tag: 'resource-name', val: name });

/**
 * The events.k8s.io/v1 Event kind: what `actions.recordEvent` records
 * (recording needs no `writes` declaration, only the sidecar's `events`
 * grant); reading Events back needs a subscription (`subscription(EVENT)`).
 */
export const EVENT = gvk('events.k8s.io', 'v1', 'Event');

/** Kind-refs of common built-in kinds (group/version/kind form). */
export const kinds = {
  ConfigMap: gvk('', 'v1', 'ConfigMap'),
  Namespace: gvk('', 'v1', 'Namespace'),
  Node: gvk('', 'v1', 'Node'),
  Pod: gvk('', 'v1', 'Pod'),
  ResourceQuota: gvk('', 'v1', 'ResourceQuota'),
  Secret: gvk('', 'v1', 'Secret'),
  Service: gvk('', 'v1', 'Service'),
  DaemonSet: gvk('apps', 'v1', 'DaemonSet'),
  Deployment: gvk('apps', 'v1', 'Deployment'),
  ReplicaSet: gvk('apps', 'v1', 'ReplicaSet'),
  StatefulSet: gvk('apps', 'v1', 'StatefulSet'),
  NetworkPolicy: gvk('networking.k8s.io', 'v1', 'NetworkPolicy'),
  Event: EVENT,
};

/** `apps/v1` for group `apps`, `v1` for the core group. */
export const apiVersionOf = (g) => (g.group === '' ? g.version : `${g.group}/${g.version}`);

/** Splits an `apiVersion` (`apps/v1`, `v1`) and pairs it with `kind`. */
export function gvkOf(apiVersion, kind) {
  const slash = apiVersion.indexOf('/');
  return slash < 0
    ? { group: '', version: apiVersion, kind }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1), kind };
}

// The group/version/kind record of a kind-ref or of a record.
function gvkRecord(k) {
  if (k != null && k.tag === 'gvk') return k.val;
  if (k != null && k.tag === 'resource-name') {
    throw new TypeError(`kind ${k.val} is named by resource: compare kinds by group/version/kind`);
  }
  return k;
}

/**
 * Whether `x` is of `kindRef`'s group and kind (any version). `x` is a
 * delta (one host call; `false` for `synced`), an `object` (one host call),
 * a group/version/kind record, or an owner reference. To tell a delta's
 * subscriptions apart for free, compare `delta.subscription` instead.
 */
export function isKind(x, kindRef) {
  const want = gvkRecord(kindRef);
  let have;
  if (x == null) return false;
  if (typeof x.deltaType === 'string') {
    if (x.object == null) return false;
    have = x.object.kind();
  } else if (typeof x.kind === 'function') {
    have = x.kind();
  } else if (typeof x.apiVersion === 'string') {
    have = gvkOf(x.apiVersion, x.kind);
  } else {
    have = x;
  }
  return have.group === want.group && have.kind === want.kind;
}

// ---- delta types -----------------------------------------------------------

/** The object delta types a subscription delivers by default: added, updated, deleted, resync. */
export const DELTAS = Object.freeze(['added', 'updated', 'deleted', 'resync']);
/** Every delta type a subscription may list (all but `requeue`, which comes whenever `handle` asks for it). */
export const SUBSCRIBABLE = Object.freeze(['added', 'updated', 'deleted', 'resync', 'synced']);
/** Every delta type, `requeue` included. */
export const ALL_DELTAS = Object.freeze(['added', 'updated', 'deleted', 'resync', 'synced', 'requeue']);

// ---- errors ----------------------------------------------------------------

/**
 * A handler error: throw `permanent(..)` or `retry(..)` from `handle`.
 * `tag` is `permanent` or `retry`, `val` (and `message`) the message.
 */
export class HandlerError extends Error {
  constructor(tag, msg) {
    super(msg);
    this.name = 'HandlerError';
    this.tag = tag;
  }

  /** The message (the WIT variant's payload). */
  get val() {
    return this.message;
  }

  /** Whether the host will retry the delta. */
  isRetry() {
    return this.tag === 'retry';
  }
}

/** A failure retrying will not fix (malformed input, a refused action): the host records the delta as dead. */
export const permanent = (msg) => new HandlerError('permanent', String(msg));
/** A transient failure: the host retries the delta with backoff; the next attempt's delta says why (`lastFailure`). */
export const retry = (msg) => new HandlerError('retry', String(msg));

/** Whether `e` is a handler error (`permanent(..)`, `retry(..)`, or a `{tag, val}` of either). */
export const isHandlerError = (e) => e !== null && typeof e === 'object'
  && (e.tag === 'permanent' || e.tag === 'retry') && typeof e.val === 'string';

/**
 * Runs `f` and turns anything it throws (but a handler error) into
 * `permanent('<context>: <message>')`: `orPermanent('decoding data', () => JSON.parse(s))`.
 */
export function orPermanent(context, f) {
  try {
    return f();
  } catch (e) {
    if (isHandlerError(e)) throw e;
    throw permanent(`${context}: ${message(e)}`);
  }
}

/** Like `orPermanent`, as a `retry` error. */
export function orRetry(context, f) {
  try {
    return f();
  } catch (e) {
    if (isHandlerError(e)) throw e;
    throw retry(`${context}: ${message(e)}`);
  }
}

/**
 * `<kind>: <message>` of a delta's `lastFailure` (`retry`, `trapped`,
 * `conflict` or `action-failed`), or `undefined` on a first attempt.
 */
export const failureText = (failure) => (failure == null ? undefined : `${failure.tag}: ${failure.val}`);
/** Whether this delta was handled before and failed (`attempt > 1`). */
export const retried = (delta) => delta.attempt > 1;
/**
 * Whether the previous attempt failed on a conflict (another field manager,
 * or a uid/resourceVersion precondition that did not hold): re-read the
 * cache and decide again.
 */
export const isConflict = (delta) => delta.lastFailure != null && delta.lastFailure.tag === 'conflict';

// ---- handled ---------------------------------------------------------------

/** `handle`'s "done": nothing more until the object changes (returning nothing means the same). */
export const done = Object.freeze({ tag: 'done' });

/**
 * `handle`'s "done for now": deliver this object again, as a `requeue`
 * delta, after `ms` milliseconds (rounded down, at least 0), unless a newer
 * delta of it comes first. `return requeueAfter(30_000)`.
 */
export function requeueAfter(ms) {
  const n = typeof ms === 'bigint' ? ms : Math.floor(Number(ms));
  if (typeof n !== 'bigint' && !Number.isFinite(n)) throw new TypeError(`requeueAfter: ${ms} is not a number of milliseconds`);
  return Object.freeze({ tag: 'requeue-after', val: n < 0 ? 0 : n });
}

// Whether this engine passes 64-bit integers as BigInt (componentize-js)
// or as number (QuickJS): asked once, of the clock's `s64` seconds.
let bigints;
const wide = (n) => {
  if (bigints === undefined) bigints = typeof rawClock.now().seconds === 'bigint';
  if (bigints) return BigInt(n);
  return Number(n);
};

// What `handle` returned, as the WIT `handled` variant.
function handled(value) {
  if (value === undefined || value === null || value === done || (value && value.tag === 'done')) return { tag: 'done' };
  if (value && value.tag === 'requeue-after') return { tag: 'requeue-after', val: wide(value.val) };
  throw permanent(`handle returned ${typeof value}: return nothing, done or requeueAfter(ms)`);
}

// ---- registration ----------------------------------------------------------

/**
 * A subscription record. Defaults: all namespaces, no selectors, the object
 * deltas (`DELTAS`: added, updated, deleted, resync), every update
 * delivered (`fields: []`), the host's default resync period.
 *
 * `opts`: `namespace`, `labels` (label selector text or a `LabelSelector`),
 * `fieldSelector`, `deltas` (`[]` or `cacheOnly: true`: no deltas, the kind
 * is only readable through `cache`), `fields` (JSON pointers: updates
 * changing none of them, nor labels, annotations or the deletion timestamp,
 * are skipped), `resyncSeconds` (`0` turns resync off).
 */
export function subscription(kind, opts = {}) {
  const labels = opts.labels instanceof LabelSelector ? opts.labels.toString() : opts.labels;
  return {
    kind,
    namespace: absent(opts.namespace),
    labelSelector: absent(labels),
    fieldSelector: absent(opts.fieldSelector),
    deltas: opts.cacheOnly ? [] : [...(opts.deltas ?? DELTAS)],
    fields: [...(opts.fields ?? [])],
    resyncSeconds: absent(opts.resyncSeconds),
  };
}

/**
 * A secondary index named `name` over `kind`, keyed by the value(s) at
 * `pointer` (`*` iterates an array: `/metadata/ownerReferences/*\/uid`),
 * readable through `cache.byIndex`.
 */
export const index = (name, kind, pointer) => ({ name, kind, pointer });

/**
 * A registration record: `subscriptions` (deltas name them by position,
 * `delta.subscription`), `writes` (kind-refs the plugin may write; Events
 * need none), `indexes`. Every list defaults to empty.
 */
export function registration({ subscriptions = [], writes = [], indexes = [] } = {}) {
  return { subscriptions, writes, indexes };
}

// ---- config and context ----------------------------------------------------

/**
 * Decodes the config JSON (a string, or the context) against `defaults`,
 * a flat object of default values: an empty string or `null` is `{}`,
 * unknown keys and values of another type than the default (or `null`) are
 * errors, thrown as `Error('invalid config: ...')` (which refuses the
 * version when thrown from the constructor).
 */
export function parseConfig(config, defaults) {
  const text = config !== null && typeof config === 'object' ? config.config : config;
  let value;
  try {
    value = text == null || String(text).trim() === '' ? null : JSON.parse(text);
  } catch (e) {
    throw new Error(`invalid config: ${message(e)}`);
  }
  if (value === null) value = {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new Error('invalid config: expected an object');
  }
  const out = { ...defaults };
  for (const [k, v] of Object.entries(value)) {
    if (!Object.prototype.hasOwnProperty.call(defaults, k)) {
      const known = Object.keys(defaults).map((d) => `\`${d}\``);
      throw new Error(`invalid config: unknown field \`${k}\`, ${known.length === 0 ? 'expected no fields' : `expected one of ${known.join(', ')}`}`);
    }
    const want = Array.isArray(defaults[k]) ? 'array' : typeof defaults[k];
    const have = Array.isArray(v) ? 'array' : typeof v;
    if (v === null || have !== want) {
      throw new Error(`invalid config: \`${k}\` must be a${/^[aeiou]/.test(want) ? 'n' : ''} ${want}`);
    }
    out[k] = v;
  }
  return out;
}

/**
 * What the plugin's constructor receives: `name` (its file name without
 * `.wasm`), `version` (12 hex digits of the component's SHA-256), `config`
 * (the sidecar's `config` section as JSON, `{}` when absent),
 * `fieldManager` (`kubewasm/<name>`, what the host applies and patches
 * with) and `parseConfig(defaults)`.
 */
export class Context {
  constructor({ name, version, config }) {
    this.name = name;
    this.version = version;
    this.config = config;
  }

  /** The field manager the host writes with: `kubewasm/<name>`. */
  get fieldManager() {
    return `kubewasm/${this.name}`;
  }

  /** `parseConfig(this.config, defaults)`. */
  parseConfig(defaults) {
    return parseConfig(this.config, defaults);
  }
}

// ---- resource lifetimes ----------------------------------------------------
// Objects and selectors (WIT resources) hold host handles; the engines drop
// them only when their garbage collector finalizes them, which may be never
// within a busy instance: the host's handle table then fills up and the call
// fails ("plugin exceeded ... handles"). The SDK disposes every handle it
// handed out during `handle` (the delta's objects, cache reads, selectors
// parsed then) when `handle` returns, unless `keep` took it.
const symbolDispose = Symbol.dispose || Symbol.for('dispose');
let inHandle = false;
let held = new Set();
const hold = (o) => {
  if (inHandle && o != null) held.add(o);
  return o;
};
const dispose = (o) => {
  if (o != null && typeof o[symbolDispose] === 'function') {
    try { o[symbolDispose](); } catch { /* already dropped */ }
  }
};
function release(delta) {
  const all = held;
  held = new Set();
  all.add(delta.object);
  all.add(delta.oldObject);
  for (const o of all) dispose(o);
}

/**
 * Keeps an object read from the cache, or a `LabelSelector` parsed, during
 * the current `handle` call alive after the call returns (the SDK disposes
 * the others then). Returns `x`. A delta's own objects are always disposed.
 */
export function keep(x) {
  held.delete(x instanceof LabelSelector ? x.handle : x);
  return x;
}

// ---- objects ---------------------------------------------------------------

/**
 * The delta's object, for a delta that must carry one (every type but
 * `synced`); else a permanent error.
 */
export function objectOf(delta) {
  if (delta.object == null) {
    const k = key(delta);
    throw permanent(k === '' ? `${delta.deltaType} delta carries no object` : `${delta.deltaType} delta for ${k} carries no object`);
  }
  return delta.object;
}

/** The previous state's whole metadata (`updated` deltas only; one host call), or `undefined`. */
export const oldMeta = (delta) => (delta.oldObject == null ? undefined : delta.oldObject.meta());

const lookup = (pairs, k) => {
  const found = pairs.find(([name]) => name === k);
  return found === undefined ? undefined : found[1];
};
const isObjectHandle = (x) => typeof x.name === 'function';

/**
 * The value of label `k` on an `object` (one host call, nothing else is
 * copied) or a metadata record (`object.meta()`), or `undefined`.
 */
export const label = (x, k) => (isObjectHandle(x) ? absent(x.label(k)) : lookup(x.labels, k));
/** The value of annotation `k` on an `object` (one host call) or a metadata record, or `undefined`. */
export const annotation = (x, k) => (isObjectHandle(x) ? absent(x.annotation(k)) : lookup(x.annotations, k));
/** Whether an `object` (one host call) or metadata record is being finalized (has a deletion timestamp). */
export const isTerminating = (x) => (isObjectHandle(x) ? x.deletionTimestamp() : x.deletionTimestamp) != null;
/** Whether `finalizer` is among an `object`'s (one host call) or metadata record's finalizers. */
export const hasFinalizer = (x, finalizer) => (isObjectHandle(x) ? x.finalizers() : x.finalizers).includes(finalizer);

/**
 * `namespace/name`, or `name` for cluster-scoped objects (`''` for a
 * `synced` delta), of a delta (its scalars, no host call), an `object` (two
 * host calls), a metadata record or an object reference.
 */
export function key(x) {
  const ns = isObjectHandle(x) ? x.namespace() : x.namespace;
  const name = isObjectHandle(x) ? x.name() : x.name;
  return ns != null ? `${ns}/${name}` : name;
}

// A field value as a JS value; integers as numbers (precision beyond 2^53
// is lost, as with JSON.parse).
function fieldValue(v, pointer) {
  switch (v.tag) {
    case 'null': return null;
    case 'integer': return Number(v.val);
    case 'json':
      try {
        return JSON.parse(v.val);
      } catch (e) {
        throw permanent(`field ${pointer} is not valid JSON: ${message(e)}`);
      }
    default: return v.val;
  }
}

/**
 * The value at JSON pointer `pointer` of an `object` as a JS value
 * (`undefined` when absent, `null` for JSON null; arrays and objects cost a
 * parse of that subtree only). One host call.
 */
export function fieldJson(object, pointer) {
  const v = object.field(pointer);
  return v == null ? undefined : fieldValue(v, pointer);
}

/** Several pointers at once (one host call), as `fieldJson` reads each. */
export function fieldsJson(object, pointers) {
  return object.fields(pointers).map((v, i) => (v == null ? undefined : fieldValue(v, pointers[i])));
}

/** The string at `pointer`, or `undefined` (absent or not a string). */
export function fieldStr(object, pointer) {
  const v = object.field(pointer);
  return v != null && v.tag === 'text' ? v.val : undefined;
}

/** The integer at `pointer` as a number, or `undefined` (absent or not an integer). */
export function fieldInt(object, pointer) {
  const v = object.field(pointer);
  return v != null && v.tag === 'integer' ? Number(v.val) : undefined;
}

/** The boolean at `pointer`, or `undefined` (absent or not a boolean). */
export function fieldBool(object, pointer) {
  const v = object.field(pointer);
  return v != null && v.tag === 'boolean' ? v.val : undefined;
}

/** The whole object as a JS value (`object.toJson()`, parsed: costs a full parse). */
export const parseObject = (object) => orPermanent('cannot decode object', () => JSON.parse(object.toJson()));

// ---- object references and preconditions -----------------------------------

/**
 * A reference to an object, for actions: `objectRef(kind, namespace, name)`
 * (`namespace` `undefined` for cluster-scoped objects), or
 * `objectRef(kind, x)` with `x` a delta (its scalars, no host call), an
 * `object` (two host calls), a metadata record or a reference.
 */
export function objectRef(kind, x, name) {
  if (arguments.length >= 3) return { kind, namespace: absent(x), name };
  if (isObjectHandle(x)) return { kind, namespace: absent(x.namespace()), name: x.name() };
  return { kind, namespace: absent(x.namespace), name: x.name };
}

/** A reference to an `object` with its own group/version/kind (three host calls). */
export const refOf = (object) => objectRef({ tag: 'gvk', val: object.kind() }, object);

/**
 * A reference to an owner (an owner reference), in `namespace`: owners share
 * their dependent's namespace, or are cluster-scoped. Guard a write to it
 * with `preconditions.uid(owner.uid)`.
 */
export const ownerObjectRef = (owner, namespace) => ({ kind: { tag: 'gvk', val: gvkOf(owner.apiVersion, owner.kind) }, namespace: absent(namespace), name: owner.name });

const nonEmpty = (s) => (s == null || s === '' ? undefined : String(s));

/**
 * Preconditions the server checks before a write (a write whose
 * precondition does not hold fails as a conflict, which the next attempt's
 * delta reports as `lastFailure` `conflict`). Empty strings set none.
 */
export const preconditions = {
  /** No precondition: the write happens whatever the object's state. */
  none: () => ({ uid: undefined, resourceVersion: undefined }),
  /** The object must have this uid (it was not deleted and recreated under the same name). */
  uid: (uid) => ({ uid: nonEmpty(uid), resourceVersion: undefined }),
  /** The object must be at this resourceVersion (nobody wrote it since it was read). */
  resourceVersion: (rv) => ({ uid: undefined, resourceVersion: nonEmpty(rv) }),
  /** Both, from strings: `preconditions.both(uid, resourceVersion)`. */
  both: (uid, rv) => ({ uid: nonEmpty(uid), resourceVersion: nonEmpty(rv) }),
  /**
   * The uid and resourceVersion of a delta's object (its scalars, no host
   * call), an `object` (two host calls) or a metadata record: the write
   * happens only if nobody changed the object since.
   */
  of: (x) => (isObjectHandle(x)
    ? { uid: nonEmpty(x.uid()), resourceVersion: nonEmpty(x.resourceVersion()) }
    : { uid: nonEmpty(x.uid), resourceVersion: nonEmpty(x.resourceVersion) }),
  /** The uid only, of a delta (no host call), an `object` (one host call) or a metadata record. */
  uidOf: (x) => ({ uid: nonEmpty(isObjectHandle(x) ? x.uid() : x.uid), resourceVersion: undefined }),
};

// ---- label selectors (the host's) --------------------------------------------

/**
 * A label selector parsed and matched by the host, with the API server's
 * grammar (`app=web,tier!=db,env in (a,b),!legacy,release notin (canary)`;
 * the empty selector matches everything). A selector parsed during `handle`
 * is disposed when the call returns (unless `keep(selector)`); one parsed
 * in the constructor lives as long as the instance.
 */
export class LabelSelector {
  /** Wraps a raw `selectors.label-selector` handle. */
  constructor(handle) {
    this.handle = handle;
    this.text = undefined;
  }

  /** Parses `text`; throws an Error whose message (the host's) names the offending part. */
  static parse(text) {
    let h;
    try {
      h = rawSelectors.LabelSelector.parse(String(text));
    } catch (e) {
      const p = payload(e);
      throw new Error(typeof p === 'string' ? p : message(e));
    }
    return new LabelSelector(hold(h));
  }

  /**
   * Whether a label set matches: `[[key, value], ...]` (as WIT gives them)
   * or a plain object `{key: value}`. For an `object`, `matchesObject` copies
   * nothing.
   */
  matches(labels) {
    const pairs = Array.isArray(labels) ? labels : Object.entries(labels ?? {}).map(([k, v]) => [k, String(v)]);
    return this.handle.matches(pairs);
  }

  /** Whether an `object`'s labels match (read on the host, not copied). */
  matchesObject(object) {
    return this.handle.matchesObject(object);
  }

  /** The canonical text (requirements sorted by key, as the API server prints them); one host call, then cached. */
  toString() {
    if (this.text === undefined) this.text = this.handle.toString();
    return this.text;
  }

  /** Whether this is the empty selector, which matches everything. */
  isEverything() {
    return this.toString() === '';
  }

  /** Drops the host handle now (in a loop, rather than holding one per iteration until `handle` returns). */
  dispose() {
    held.delete(this.handle);
    dispose(this.handle);
  }
}

// ---- cache -----------------------------------------------------------------

function cacheRefused(e) {
  const p = payload(e);
  const why = {
    'not-subscribed': 'not subscribed',
    'unknown-index': 'unknown index',
    'invalid-selector': 'invalid selector',
    forbidden: 'not granted',
  };
  if (p && why[p.tag]) return permanent(`cache read refused, ${why[p.tag]}: ${p.val}`);
  return permanent(`cache read failed: ${message(e)}`);
}

const selectorText = (s) => {
  if (s == null) return undefined;
  const text = s instanceof LabelSelector ? s.toString() : String(s);
  return text === '' ? undefined : text;
};

/**
 * Reads of the host's lister cache: never an API call, only kinds the
 * plugin subscribed to (a `cacheOnly` subscription suffices). A refusal is a
 * permanent error (`cache read refused, not subscribed: ...`, `unknown
 * index`, `invalid selector`, `not granted`). Objects are disposed when
 * `handle` returns (see `keep`).
 */
export const cache = {
  /** One object by kind, namespace (`undefined` if cluster-scoped) and name, or `undefined`. */
  get(kind, namespace, name) {
    try { return absent(hold(rawCache.get(kind, absent(namespace), name))); } catch (e) { throw cacheRefused(e); }
  },
  /**
   * Objects of a kind in one namespace or all (`undefined`), optionally
   * filtered by a label selector (text or `LabelSelector`; empty: all);
   * sorted by namespace then name.
   */
  list(kind, namespace, labelSelector) {
    try { return rawCache.list(kind, absent(namespace), selectorText(labelSelector)).map(hold); } catch (e) { throw cacheRefused(e); }
  },
  /** Objects whose declared index yields `value`; sorted by namespace then name. */
  byIndex(indexName, value) {
    try { return rawCache.byIndex(indexName, value).map(hold); } catch (e) { throw cacheRefused(e); }
  },
};

// ---- JSON patches ----------------------------------------------------------

/** Escapes one reference token of a JSON pointer: `~` → `~0`, `/` → `~1`. */
export const escapePointer = (segment) => String(segment).replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * A JSON pointer from unescaped segments: `pointer(['metadata', 'labels',
 * 'app.kubernetes.io/name'])` is `/metadata/labels/app.kubernetes.io~1name`;
 * `[]` is `''` (the whole document).
 */
export const pointer = (segments) => segments.map((s) => `/${escapePointer(s)}`).join('');

/**
 * An RFC 6902 JSON patch: operations applied in order, all or nothing.
 * Paths are JSON pointers, already escaped (build them with `pointer`); `-`
 * as the last segment of an `add` appends to an array. Send it with
 * `actions.patchJson`.
 *
 *   new JsonPatch().add('/metadata/labels/a', 'b').remove('/metadata/labels/stale')
 */
export class JsonPatch {
  constructor() {
    /** The operations, as `{op, path, value?}` objects. */
    this.ops = [];
  }

  /** Appends one operation `{op, path, value?}` (the value only when `hasValue`); the named methods call it. */
  op(op, path, value, hasValue) {
    this.ops.push(hasValue ? { op, path, value } : { op, path });
    return this;
  }

  /** `add`: sets `path` (an object member, or inserts into an array at that index; `-` appends). */
  add(path, value) { return this.op('add', path, value, true); }
  /** `remove`: deletes `path`, which must exist. */
  remove(path) { return this.op('remove', path, undefined, false); }
  /** `replace`: sets `path`, which must exist. */
  replace(path, value) { return this.op('replace', path, value, true); }
  /** `test`: the whole patch fails unless `path` equals `value` (as invalid, 422: prefer a resourceVersion precondition). */
  test(path, value) { return this.op('test', path, value, true); }
  /** How many operations. */
  get length() { return this.ops.length; }
  /** Whether there are no operations. */
  isEmpty() { return this.ops.length === 0; }
  /** The operations (what `JSON.stringify` writes). */
  toJSON() { return this.ops; }
  /** The compact JSON text (what is sent). */
  toString() { return JSON.stringify(this.ops); }
}

// ---- finalizers ------------------------------------------------------------

/**
 * The JSON patch adding `finalizer` to an object whose finalizers are
 * `current`: `add /metadata/finalizers/-` (or `add /metadata/finalizers`
 * with `[finalizer]` when there are none); `undefined` when it is already
 * there. Send it with a resourceVersion precondition (as
 * `actions.addFinalizer` does).
 */
export function addFinalizerPatch(current, finalizer) {
  if (current.includes(finalizer)) return undefined;
  return current.length === 0
    ? new JsonPatch().add('/metadata/finalizers', [finalizer])
    : new JsonPatch().add('/metadata/finalizers/-', finalizer);
}

/**
 * The JSON patch removing `finalizer` from an object whose finalizers are
 * `current`: one `remove /metadata/finalizers/<i>` per occurrence, highest
 * index first; `undefined` when it is not there. Indexes are only safe with
 * a resourceVersion precondition (as `actions.removeFinalizer` sends it).
 */
export function removeFinalizerPatch(current, finalizer) {
  const at = [];
  current.forEach((f, i) => { if (f === finalizer) at.push(i); });
  if (at.length === 0) return undefined;
  const patch = new JsonPatch();
  for (const i of at.reverse()) patch.remove(`/metadata/finalizers/${i}`);
  return patch;
}

// ---- owner references -------------------------------------------------------

/**
 * The first owner reference of an `object` (in `metadata.ownerReferences`
 * order) of `kindRef`'s group and kind, any version, or `undefined`. One
 * host call.
 */
export const findOwner = (object, kindRef) => object.ownerReferences().find((o) => isKind(o, kindRef));

/** The owner reference of an `object` marked `controller: true`, or `undefined` (one host call). */
export const controllerOwner = (object) => absent(object.controller());

/**
 * A controller owner reference (`controller` and `blockOwnerDeletion` true)
 * to the object of kind `kind` (a group/version/kind record or kind-ref)
 * named `name` with uid `uid`.
 */
export function controllerOf(kind, name, uid) {
  const g = gvkRecord(kind);
  return { apiVersion: apiVersionOf(g), kind: g.kind, name, uid, controller: true, blockOwnerDeletion: true };
}

/**
 * A controller reference to an `object` (its apiVersion, kind, name and
 * uid), to embed in what the plugin creates so that it is garbage-collected
 * with `object`. Three host calls.
 */
export const controllerRef = (object) => controllerOf(object.kind(), object.name(), object.uid());

/**
 * The JSON form of a `metadata.ownerReferences` entry: `apiVersion`,
 * `kind`, `name`, `uid`, then `controller` and `blockOwnerDeletion` only
 * when true.
 */
export function ownerReferenceJson(ref) {
  const out = { apiVersion: ref.apiVersion, kind: ref.kind, name: ref.name, uid: ref.uid };
  if (ref.controller) out.controller = true;
  if (ref.blockOwnerDeletion) out.blockOwnerDeletion = true;
  return out;
}

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Adds `reference` (an owner reference) to the JS object `dependent`'s
 * `metadata.ownerReferences` (creating `metadata` and the list as needed),
 * replacing an entry for the same owner (same uid, or same group, kind and
 * name). A permanent error when `dependent` is not an object, its metadata
 * or list is malformed, or `reference` is a controller and another owner
 * already is (an object has at most one controller).
 */
export function setOwnerReference(dependent, reference) {
  if (!isPlainObject(dependent)) throw permanent('owner reference: the dependent is not a JSON object');
  if (dependent.metadata == null) dependent.metadata = {};
  const meta = dependent.metadata;
  if (!isPlainObject(meta)) throw permanent('owner reference: metadata is not a JSON object');
  if (meta.ownerReferences == null) meta.ownerReferences = [];
  const list = meta.ownerReferences;
  if (!Array.isArray(list)) throw permanent('owner reference: metadata.ownerReferences is not a list');
  const group = gvkOf(reference.apiVersion, reference.kind).group;
  const str = (e, k) => (isPlainObject(e) && typeof e[k] === 'string' ? e[k] : '');
  const same = (e) => str(e, 'uid') === reference.uid
    || (gvkOf(str(e, 'apiVersion'), str(e, 'kind')).group === group
      && str(e, 'kind') === reference.kind && str(e, 'name') === reference.name);
  if (reference.controller) {
    const other = list.find((e) => isPlainObject(e) && e.controller === true && !same(e));
    if (other !== undefined) {
      throw permanent(`owner reference: already controlled by ${str(other, 'kind')} ${str(other, 'name')}`);
    }
  }
  const entry = ownerReferenceJson(reference);
  const at = list.findIndex(same);
  if (at >= 0) list[at] = entry;
  else list.push(entry);
}

/**
 * Makes `owner` (an `object`) the controller of the JS object `dependent`
 * (what you then pass to `actions.apply`): `setOwnerReference` with
 * `controllerRef(owner)`.
 */
export const setControllerReference = (dependent, owner) => setOwnerReference(dependent, controllerRef(owner));

// ---- actions ---------------------------------------------------------------

function actionRefused(e) {
  const p = payload(e);
  if (p && p.tag === 'not-declared') return permanent(`action refused, not declared in writes: ${p.val}`);
  if (p && p.tag === 'invalid') return permanent(`action refused as invalid: ${p.val}`);
  if (p && p.tag === 'forbidden') return permanent(`action refused, not granted: ${p.val}`);
  return permanent(`action failed: ${message(e)}`);
}

const call = (f) => { try { f(); } catch (e) { throw actionRefused(e); } };
const json = (v) => (typeof v === 'string' ? v : JSON.stringify(v));
const pre = (p) => (p == null ? preconditions.none() : { uid: nonEmpty(p.uid), resourceVersion: nonEmpty(p.resourceVersion) });

/** The merge patch setting these annotations (an object `{key: value}`): `{"metadata":{"annotations":{...}}}`, keys sorted. */
export function annotationsPatch(annotations) {
  const sorted = {};
  for (const k of Object.keys(annotations).sort()) sorted[k] = String(annotations[k]);
  return { metadata: { annotations: sorted } };
}

/**
 * Writes. Each call is validated by the host at once (the kind declared in
 * the registration's `writes` and granted by the sidecar, the JSON well
 * formed) and buffered; the host executes the buffer in order after
 * `handle` returns, and drops it when `handle` throws. A refusal is a
 * permanent error (`action refused, not declared in writes: ...`, `as
 * invalid`, `not granted`). Every write takes `preconditions` (default:
 * none), checked by the server: one that does not hold fails the write as a
 * conflict, reported by the next attempt's delta.
 */
export const actions = {
  /**
   * Server-side apply of an object (a JS value, or JSON text, with
   * apiVersion, kind, metadata.name and, if namespaced,
   * metadata.namespace) as field manager `kubewasm/<plugin>`; `force`
   * (default true) takes over conflicting fields.
   */
  apply(object, force = true, preconds = undefined) { call(() => rawActions.apply(json(object), force, pre(preconds))); },
  /** Server-side apply to the status subresource. */
  applyStatus(object, preconds = undefined) { call(() => rawActions.applyStatus(json(object), pre(preconds))); },
  /** A patch given as JSON text; `patchType` is `merge` or `json`. */
  patch(target, patchType, text, preconds = undefined) { call(() => rawActions.patch(target, patchType, String(text), pre(preconds))); },
  /** An RFC 7386 JSON merge patch (a JS value or JSON text). */
  patchMerge(target, patch, preconds = undefined) { call(() => rawActions.patch(target, 'merge', json(patch), pre(preconds))); },
  /** An RFC 6902 JSON patch: a `JsonPatch`, an array of operations, or JSON text. */
  patchJson(target, patch, preconds = undefined) { call(() => rawActions.patch(target, 'json', json(patch instanceof JsonPatch ? patch.ops : patch), pre(preconds))); },
  /** Sets annotations (`{key: value}`) on `target` with one merge patch (`annotationsPatch`). */
  annotate(target, annotations, preconds = undefined) { actions.patchMerge(target, annotationsPatch(annotations), preconds); },
  /** `annotate` on an `object` itself (its kind, namespace and name), guarded by its uid. */
  annotateObject(object, annotations) { actions.annotate(refOf(object), annotations, preconditions.uid(object.uid())); },
  /**
   * Deletes an object (one already gone is not an error); `propagation` is
   * `background` (default), `foreground` or `orphan`.
   */
  delete(target, propagation = 'background', preconds = undefined) { call(() => rawActions.delete(target, propagation, pre(preconds))); },
  /** `delete` of an `object` itself, guarded by its uid (a namesake created since is left alone). */
  deleteObject(object, propagation = 'background') { actions.delete(refOf(object), propagation, preconditions.uid(object.uid())); },
  /**
   * Records an events.k8s.io/v1 Event: `{regarding, regardingUid?,
   * eventType: 'normal'|'warning', reason, note}`. The host reports it as
   * controller `kubewasm`, action the plugin's name, instance
   * `<host>/<plugin>@<version>` (the plugin is the reporter), and folds
   * repeats into one Event with a series count. Needs no `writes`
   * declaration, only the sidecar's `events` grant. `reason` is
   * UpperCamelCase (`ReplicaCreated`); 1 KiB of `note` is kept.
   */
  recordEvent(event) {
    const e = {
      regarding: event.regarding,
      regardingUid: nonEmpty(event.regardingUid),
      eventType: event.eventType ?? 'normal',
      reason: String(event.reason),
      note: String(event.note ?? ''),
    };
    call(() => rawActions.recordEvent(e));
  },
  /** Records an Event about `regarding` (a reference; `regardingUid` optional). */
  event(regarding, eventType, reason, note, regardingUid = undefined) { actions.recordEvent({ regarding, regardingUid, eventType, reason, note }); },
  /** Records an Event about an `object` (its kind, namespace, name and uid). */
  eventAbout(object, eventType, reason, note) { actions.recordEvent({ regarding: refOf(object), regardingUid: object.uid(), eventType, reason, note }); },
  /**
   * Adds `finalizer` to an `object` unless it is already there: one JSON
   * patch (`addFinalizerPatch`) with uid and resourceVersion preconditions,
   * so a concurrent write fails it as a conflict instead of losing either
   * change. Returns whether a patch was queued.
   */
  addFinalizer(object, finalizer) { return finalizerPatch(object, addFinalizerPatch, finalizer); },
  /**
   * Removes `finalizer` from an `object` if it is there: one JSON patch
   * (`removeFinalizerPatch`, by index, which the resourceVersion
   * precondition makes safe) with uid and resourceVersion preconditions.
   * Returns whether a patch was queued.
   */
  removeFinalizer(object, finalizer) { return finalizerPatch(object, removeFinalizerPatch, finalizer); },
};

function finalizerPatch(object, build, finalizer) {
  const rv = object.resourceVersion();
  const patch = build(object.finalizers(), finalizer);
  if (patch === undefined) return false;
  actions.patchJson(refOf(object), patch, preconditions.both(object.uid(), rv));
  return true;
}

// ---- log and clock ---------------------------------------------------------

const write = (level) => (msg, fields = {}) => {
  if (rawLog.enabled(level)) rawLog.write(level, String(msg), Object.entries(fields).map(([k, v]) => [k, String(v)]));
};

/**
 * Structured logging into the host's log, tagged with the plugin's name:
 * `log.info('applied', {namespace: ns})` (field values are stringified;
 * nothing is built when the level is off). `log.enabled(level)` asks first.
 */
export const log = {
  enabled: (level) => rawLog.enabled(level),
  trace: write('trace'), debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error'),
};

/**
 * The host's clock: `now()` (`{seconds, nanoseconds}` since the Unix epoch;
 * `seconds` a BigInt under componentize-js, a number under QuickJS),
 * `nowMillis()` (a number), `nowRfc3339()` (`2026-11-22T17:00:00Z`).
 */
export const clock = {
  now: () => rawClock.now(),
  nowMillis: () => {
    const t = rawClock.now();
    return Number(t.seconds) * 1000 + Math.floor(t.nanoseconds / 1e6);
  },
  nowRfc3339: () => rawClock.nowRfc3339(),
};

// ---- the export ------------------------------------------------------------

/**
 * Builds the `handler` export from a plugin class:
 *
 * - `new Plugin(ctx)` once per loaded version, with a `Context` (`name`,
 *   `version`, `config`, `fieldManager`, `parseConfig(defaults)`); throw to
 *   refuse the version (the previous one keeps serving).
 * - `registration()` right after: what `register` answers.
 * - `handle(delta)` once per delta, one at a time: return nothing (or
 *   `done`) when finished, `requeueAfter(ms)` to see the object again as a
 *   `requeue` delta; throw `retry(..)` for transient conditions (retried
 *   with backoff), `permanent(..)` for input that will never work; any other
 *   exception is permanent. Actions emitted run only if it returns.
 *
 * Handles (the delta's objects, cache reads, selectors parsed in `handle`)
 * are disposed when `handle` returns: do not keep them across calls
 * (except through `keep`).
 */
export function definePlugin(Plugin) {
  let plugin = null;
  return {
    register(context) {
      try {
        const p = new Plugin(new Context(context));
        const r = p.registration();
        plugin = p;
        return r;
      } catch (e) {
        throw message(e);
      }
    },
    handle(delta) {
      if (plugin === null) throw { tag: 'permanent', val: 'handle called before register' };
      inHandle = true;
      try {
        return handled(plugin.handle(delta));
      } catch (e) {
        if (isHandlerError(e)) throw { tag: e.tag, val: e.val };
        throw { tag: 'permanent', val: message(e) };
      } finally {
        inHandle = false;
        release(delta);
      }
    },
  };
}
