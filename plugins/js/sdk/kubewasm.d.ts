// Type declarations of the kubewasm JavaScript SDK (kubewasm.js), on the
// WIT contract `kubewasm:plugin@0.2.0` (wit/v0.2.0/plugin.wit). Editors and
// `tsc --checkJs` read them; the build (componentize-js) does not need them.
//
// Conventions: WIT options arrive as `undefined` (componentize-js) or `null`
// (QuickJS), hence `Opt<T>`; the SDK's own readers return `undefined` for
// "absent". 64-bit integers (`s64`, `u64`) arrive as `bigint`
// (componentize-js) or `number` (QuickJS), hence `Wide`.

/** A WIT `option<T>` as the engines give it. */
export type Opt<T> = T | undefined | null;
/** A WIT `s64`/`u64`: `bigint` under componentize-js, `number` under QuickJS. */
export type Wide = bigint | number;

// ---- WIT types ---------------------------------------------------------------

/** A fully qualified kind; the core group is `''`. */
export interface GroupVersionKind {
  group: string;
  version: string;
  kind: string;
}

/** How a plugin names a kind: group/version/kind, or a kubectl resource name. */
export type KindRef =
  | { tag: 'gvk'; val: GroupVersionKind }
  | { tag: 'resource-name'; val: string };

/** One entry of `metadata.ownerReferences`. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  /** `true` when this owner is the managing controller. */
  controller: boolean;
  /** `true` when the owner cannot be deleted before this object is. */
  blockOwnerDeletion: boolean;
}

/** The whole metadata record (`object.meta()`). */
export interface ObjectMeta {
  apiVersion: string;
  kind: string;
  namespace: Opt<string>;
  name: string;
  uid: string;
  resourceVersion: string;
  generation: Opt<Wide>;
  labels: [string, string][];
  annotations: [string, string][];
  ownerReferences: OwnerReference[];
  finalizers: string[];
  /** RFC 3339. */
  creationTimestamp: Opt<string>;
  /** RFC 3339; set while the object is being finalized. */
  deletionTimestamp: Opt<string>;
}

/** The value found at a JSON pointer; arrays and objects as compact JSON text. */
export type FieldValue =
  | { tag: 'null' }
  | { tag: 'boolean'; val: boolean }
  | { tag: 'integer'; val: Wide }
  | { tag: 'float'; val: number }
  | { tag: 'text'; val: string }
  | { tag: 'json'; val: string };

/**
 * The host's read-only view of one object (WIT resource `object`): each
 * method is one host call that copies only what it returns.
 */
export interface KubeObject {
  kind(): GroupVersionKind;
  namespace(): Opt<string>;
  name(): string;
  uid(): string;
  resourceVersion(): string;
  generation(): Opt<Wide>;
  /** One label's value; absent when not set. */
  label(key: string): Opt<string>;
  /** Every label, sorted by key. */
  labels(): [string, string][];
  annotation(key: string): Opt<string>;
  annotations(): [string, string][];
  ownerReferences(): OwnerReference[];
  /** The owner reference with `controller: true`, if any. */
  controller(): Opt<OwnerReference>;
  finalizers(): string[];
  deletionTimestamp(): Opt<string>;
  meta(): ObjectMeta;
  /** The value at an RFC 6901 JSON pointer; absent when the path does not exist. */
  field(pointer: string): Opt<FieldValue>;
  fields(pointers: string[]): Opt<FieldValue>[];
  /** The whole object as compact JSON. */
  toJson(): string;
}

export type DeltaType = 'added' | 'updated' | 'deleted' | 'resync' | 'synced' | 'requeue';

/** Why the previous attempt at a delta failed. */
export type Failure =
  | { tag: 'retry'; val: string }
  | { tag: 'trapped'; val: string }
  | { tag: 'conflict'; val: string }
  | { tag: 'action-failed'; val: string };

/** One event delivered to `handle`. */
export interface Delta {
  deltaType: DeltaType;
  /** Index of the subscription in the registration. */
  subscription: number;
  namespace: Opt<string>;
  /** `''` for `synced`. */
  name: string;
  uid: string;
  resourceVersion: string;
  /** New state for updates, last known state for deletes; absent only for `synced`. */
  object: Opt<KubeObject>;
  /** The previous state, `updated` only. */
  oldObject: Opt<KubeObject>;
  /** `added` deltas of an initial list or of a new version's replay. */
  initial: boolean;
  /** A `deleted` delta discovered by a relist. */
  finalStateUnknown: boolean;
  /** 1 the first time, 2 on the first retry... */
  attempt: number;
  lastFailure: Opt<Failure>;
}

/** A reference to the object an action targets. */
export interface ObjectRef {
  kind: KindRef;
  /** Absent for cluster-scoped objects. */
  namespace: Opt<string>;
  name: string;
}

/** Conditions the server checks before a write. */
export interface Preconditions {
  uid: Opt<string>;
  resourceVersion: Opt<string>;
}

export type PatchType = 'merge' | 'json';
export type Propagation = 'background' | 'foreground' | 'orphan';
export type EventType = 'normal' | 'warning';
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** An Event as `actions.recordEvent` takes it. */
export interface EventRecord {
  regarding: ObjectRef;
  /** The regarding object's uid, when known. */
  regardingUid?: Opt<string>;
  /** Default `normal`. */
  eventType?: EventType;
  /** UpperCamelCase, short (`ReplicaCreated`). */
  reason: string;
  /** Human-readable; 1 KiB is kept. Default `''`. */
  note?: string;
}

export interface Subscription {
  kind: KindRef;
  namespace: Opt<string>;
  labelSelector: Opt<string>;
  fieldSelector: Opt<string>;
  deltas: DeltaType[];
  fields: string[];
  resyncSeconds: Opt<number>;
}

export interface Index {
  name: string;
  kind: KindRef;
  pointer: string;
}

export interface Registration {
  subscriptions: Subscription[];
  writes: KindRef[];
  indexes: Index[];
}

/** How a handled delta ended. */
export type Handled = { tag: 'done' } | { tag: 'requeue-after'; val: Wide };

/** A clock reading. */
export interface Instant {
  seconds: Wide;
  nanoseconds: number;
}

/** The raw label-selector resource of the host. */
export interface RawLabelSelector {
  matches(labels: [string, string][]): boolean;
  matchesObject(object: KubeObject): boolean;
  toString(): string;
}

// ---- the SDK -------------------------------------------------------------------

/** The raw WIT imports (errors thrown as the engine throws them). */
export const raw: {
  cache: unknown;
  actions: unknown;
  selectors: unknown;
  log: unknown;
  clock: unknown;
};

// kinds

/** A kind-ref by group/version/kind (`''` is the core group). */
export function gvk(group: string, version: string, kind: string): KindRef & { tag: 'gvk' };
/** A kind-ref by kubectl resource name (`deployments.apps`). */
export function resource(name: string): KindRef & { tag: 'resource-name' };
/** events.k8s.io/v1 Event: what `actions.recordEvent` records. */
export const EVENT: KindRef & { tag: 'gvk' };
/** Kind-refs of common built-in kinds. */
export const kinds: {
  ConfigMap: KindRef; Namespace: KindRef; Node: KindRef; Pod: KindRef; ResourceQuota: KindRef;
  Secret: KindRef; Service: KindRef; DaemonSet: KindRef; Deployment: KindRef; ReplicaSet: KindRef;
  StatefulSet: KindRef; NetworkPolicy: KindRef; Event: KindRef;
};
/** `apps/v1`, or `v1` for the core group. */
export function apiVersionOf(gvk: GroupVersionKind): string;
/** Splits an `apiVersion` and pairs it with `kind`. */
export function gvkOf(apiVersion: string, kind: string): GroupVersionKind;
/**
 * Whether `x` (a delta: one host call, `false` for `synced`; an object: one
 * host call; a group/version/kind; an owner reference) is of `kindRef`'s
 * group and kind, any version. `kindRef` must be a gvk kind-ref or record.
 */
export function isKind(
  x: Delta | KubeObject | GroupVersionKind | OwnerReference | null | undefined,
  kindRef: KindRef | GroupVersionKind,
): boolean;

// delta types

/** added, updated, deleted, resync: what `subscription` delivers by default. */
export const DELTAS: readonly DeltaType[];
/** Every type a subscription may list (all but `requeue`). */
export const SUBSCRIBABLE: readonly DeltaType[];
/** Every delta type. */
export const ALL_DELTAS: readonly DeltaType[];

// errors

/** A handler error (`permanent(..)` / `retry(..)`): throw it from `handle`. */
export class HandlerError extends Error {
  constructor(tag: 'permanent' | 'retry', message: string);
  readonly tag: 'permanent' | 'retry';
  /** The message. */
  readonly val: string;
  isRetry(): boolean;
}
/** Not retried: the delta is recorded as dead. */
export function permanent(message: unknown): HandlerError;
/** Retried with backoff. */
export function retry(message: unknown): HandlerError;
export function isHandlerError(e: unknown): e is { tag: 'permanent' | 'retry'; val: string };
/** Runs `f`; anything it throws (but a handler error) becomes `permanent('<context>: <message>')`. */
export function orPermanent<T>(context: string, f: () => T): T;
/** Like `orPermanent`, as `retry`. */
export function orRetry<T>(context: string, f: () => T): T;
/** `<kind>: <message>` of a `lastFailure`, or `undefined`. */
export function failureText(failure: Opt<Failure>): string | undefined;
/** `delta.attempt > 1`. */
export function retried(delta: Delta): boolean;
/** Whether the previous attempt failed on a conflict. */
export function isConflict(delta: Delta): boolean;

// handled

/** Done; returning nothing means the same. */
export const done: Handled & { tag: 'done' };
/** Deliver the object again as a `requeue` delta after `ms` milliseconds (rounded down, at least 0). */
export function requeueAfter(ms: number | bigint): Handled & { tag: 'requeue-after' };

// registration

export interface SubscriptionOptions {
  /** Only this namespace (default: all). */
  namespace?: string;
  /** Only objects whose labels match (default: all). */
  labels?: string | LabelSelector;
  /** Only objects matching this field selector (`spec.nodeName=n1`). */
  fieldSelector?: string;
  /** Which delta types (default `DELTAS`). */
  deltas?: readonly DeltaType[];
  /** No deltas: the kind is only readable through `cache` (default false). */
  cacheOnly?: boolean;
  /** JSON pointers of the fields that matter (default `[]`: every update). */
  fields?: readonly string[];
  /** Resync period; `0` turns resync off (default: the host's). */
  resyncSeconds?: number;
}
/** A subscription record with defaults (all namespaces, `DELTAS`, every update, the host's resync). */
export function subscription(kind: KindRef, opts?: SubscriptionOptions): Subscription;
/** A secondary index over the cache, read with `cache.byIndex`. */
export function index(name: string, kind: KindRef, pointer: string): Index;
/** A registration record; every list defaults to empty. */
export function registration(parts?: {
  subscriptions?: Subscription[];
  writes?: KindRef[];
  indexes?: Index[];
}): Registration;

// config and context

/** Plain JSON values a config key may default to. */
export type ConfigValue = string | number | boolean | unknown[] | Record<string, unknown>;
/**
 * Decodes the config (JSON text, or a context) against `defaults`: empty or
 * `null` is `{}`; unknown keys and wrong types throw `invalid config: ...`.
 */
export function parseConfig<T extends Record<string, ConfigValue>>(
  config: string | { config: string },
  defaults: T,
): T;

/** What the plugin's constructor receives. */
export class Context {
  constructor(context: { name: string; version: string; config: string });
  /** The plugin's name (its file name without `.wasm`). */
  readonly name: string;
  /** 12 hex digits of the component's SHA-256. */
  readonly version: string;
  /** The sidecar's `config` section as JSON (`{}` when absent). */
  readonly config: string;
  /** `kubewasm/<name>`. */
  readonly fieldManager: string;
  parseConfig<T extends Record<string, ConfigValue>>(defaults: T): T;
}

/** Keeps a handle taken during `handle` (cache read, selector) alive after the call. */
export function keep<T>(x: T): T;

// objects

/** The delta's object, or a permanent error (for `synced`). */
export function objectOf(delta: Delta): KubeObject;
/** The previous state's metadata (`updated` only). */
export function oldMeta(delta: Delta): ObjectMeta | undefined;
/** A label of an object (one host call) or metadata record. */
export function label(x: KubeObject | ObjectMeta, key: string): string | undefined;
/** An annotation of an object (one host call) or metadata record. */
export function annotation(x: KubeObject | ObjectMeta, key: string): string | undefined;
/** Whether it has a deletion timestamp. */
export function isTerminating(x: KubeObject | ObjectMeta): boolean;
export function hasFinalizer(x: KubeObject | ObjectMeta, finalizer: string): boolean;
/** `namespace/name`, or `name` (`''` for `synced`). */
export function key(x: Delta | KubeObject | ObjectMeta | ObjectRef): string;
/** The value at a JSON pointer as a JS value (`undefined` when absent; integers as numbers). */
export function fieldJson(object: KubeObject, pointer: string): unknown;
/** Several pointers in one host call. */
export function fieldsJson(object: KubeObject, pointers: string[]): unknown[];
export function fieldStr(object: KubeObject, pointer: string): string | undefined;
export function fieldInt(object: KubeObject, pointer: string): number | undefined;
export function fieldBool(object: KubeObject, pointer: string): boolean | undefined;
/** The whole object parsed (a full parse). */
export function parseObject(object: KubeObject): any;

// references and preconditions

/** A reference by kind, namespace (`undefined`: cluster-scoped) and name. */
export function objectRef(kind: KindRef, namespace: Opt<string>, name: string): ObjectRef;
/** A reference of kind `kind` to a delta's (no host call), object's or metadata record's target. */
export function objectRef(kind: KindRef, x: Delta | KubeObject | ObjectMeta | ObjectRef): ObjectRef;
/** A reference to an object with its own kind (three host calls). */
export function refOf(object: KubeObject): ObjectRef;
/** A reference to an owner in `namespace`. */
export function ownerObjectRef(owner: OwnerReference, namespace: Opt<string>): ObjectRef;
export const preconditions: {
  none(): Preconditions;
  uid(uid: Opt<string>): Preconditions;
  resourceVersion(resourceVersion: Opt<string>): Preconditions;
  both(uid: Opt<string>, resourceVersion: Opt<string>): Preconditions;
  /** uid and resourceVersion of a delta (no host call), object (two) or metadata record. */
  of(x: Delta | KubeObject | ObjectMeta): Preconditions;
  uidOf(x: Delta | KubeObject | ObjectMeta): Preconditions;
};

// selectors

/** A label selector parsed and matched by the host. */
export class LabelSelector {
  constructor(handle: RawLabelSelector);
  readonly handle: RawLabelSelector;
  /** Throws an Error naming the offending part. */
  static parse(text: string): LabelSelector;
  matches(labels: [string, string][] | Record<string, string>): boolean;
  matchesObject(object: KubeObject): boolean;
  /** The canonical text. */
  toString(): string;
  isEverything(): boolean;
  dispose(): void;
}

// cache

export const cache: {
  get(kind: KindRef, namespace: Opt<string>, name: string): KubeObject | undefined;
  list(kind: KindRef, namespace?: Opt<string>, labelSelector?: Opt<string | LabelSelector>): KubeObject[];
  byIndex(index: string, value: string): KubeObject[];
};

// JSON patches

export function escapePointer(segment: string): string;
export function pointer(segments: string[]): string;
export interface PatchOp {
  op: 'add' | 'remove' | 'replace' | 'test';
  path: string;
  value?: unknown;
}
/** An RFC 6902 JSON patch builder. */
export class JsonPatch {
  ops: PatchOp[];
  add(path: string, value: unknown): this;
  remove(path: string): this;
  replace(path: string, value: unknown): this;
  test(path: string, value: unknown): this;
  readonly length: number;
  isEmpty(): boolean;
  toJSON(): PatchOp[];
  toString(): string;
}

// finalizers

export function addFinalizerPatch(current: string[], finalizer: string): JsonPatch | undefined;
export function removeFinalizerPatch(current: string[], finalizer: string): JsonPatch | undefined;

// owner references

export function findOwner(object: KubeObject, kindRef: KindRef | GroupVersionKind): OwnerReference | undefined;
export function controllerOwner(object: KubeObject): OwnerReference | undefined;
export function controllerOf(kind: KindRef | GroupVersionKind, name: string, uid: string): OwnerReference;
export function controllerRef(object: KubeObject): OwnerReference;
export function ownerReferenceJson(ref: OwnerReference): Record<string, string | boolean>;
export function setOwnerReference(dependent: Record<string, any>, reference: OwnerReference): void;
export function setControllerReference(dependent: Record<string, any>, owner: KubeObject): void;

// actions

/** The merge patch setting these annotations, keys sorted. */
export function annotationsPatch(annotations: Record<string, string>): { metadata: { annotations: Record<string, string> } };
export const actions: {
  /** `force` defaults to true, preconditions to none. */
  apply(object: object | string, force?: boolean, preconditions?: Preconditions): void;
  applyStatus(object: object | string, preconditions?: Preconditions): void;
  patch(target: ObjectRef, patchType: PatchType, patch: string, preconditions?: Preconditions): void;
  patchMerge(target: ObjectRef, patch: object | string, preconditions?: Preconditions): void;
  patchJson(target: ObjectRef, patch: JsonPatch | PatchOp[] | string, preconditions?: Preconditions): void;
  annotate(target: ObjectRef, annotations: Record<string, string>, preconditions?: Preconditions): void;
  annotateObject(object: KubeObject, annotations: Record<string, string>): void;
  /** `propagation` defaults to `background`. */
  delete(target: ObjectRef, propagation?: Propagation, preconditions?: Preconditions): void;
  deleteObject(object: KubeObject, propagation?: Propagation): void;
  recordEvent(event: EventRecord): void;
  event(regarding: ObjectRef, eventType: EventType, reason: string, note: string, regardingUid?: string): void;
  eventAbout(object: KubeObject, eventType: EventType, reason: string, note: string): void;
  /** Whether a patch was queued. */
  addFinalizer(object: KubeObject, finalizer: string): boolean;
  removeFinalizer(object: KubeObject, finalizer: string): boolean;
};

// log and clock

type LogFn = (message: string, fields?: Record<string, unknown>) => void;
export const log: {
  enabled(level: LogLevel): boolean;
  trace: LogFn; debug: LogFn; info: LogFn; warn: LogFn; error: LogFn;
};
export const clock: {
  now(): Instant;
  nowMillis(): number;
  nowRfc3339(): string;
};

// the export

/** A plugin class as `definePlugin` takes it. */
export interface PluginClass {
  new (ctx: Context): {
    registration(): Registration;
    handle(delta: Delta): void | Handled;
  };
}
/** The WIT `handler` export. */
export interface Handler {
  register(context: { name: string; version: string; config: string }): Registration;
  handle(delta: Delta): Handled;
}
/** Builds the `handler` export from a plugin class. */
export function definePlugin(Plugin: PluginClass): Handler;
