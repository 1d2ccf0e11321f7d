// config-replicator in JavaScript: the same config, registration and
// actions as plugins/config-replicator (see its README.md).
import {
  Selector, actions, annotation, cache, definePlugin, fieldJson, isKind, isTerminating, key, kinds,
  label, log, objectRef, oldMeta, parseConfig, parts, permanent, registration, subscription,
} from '../sdk/kubewasm.js';

const REPLICA = 'kubewasm.io/replica';
const REPLICA_OF = 'kubewasm.io/replica-of';
const REPLICATE_TO = 'kubewasm.io/replicate-to';

/** The copy of a source: its name, key, data and binaryData. */
function copyOf(meta, source) {
  const data = {};
  for (const [field, pointer] of [['binaryData', '/binaryData'], ['data', '/data']]) {
    const v = fieldJson(source, pointer);
    if (v == null) continue;
    if (typeof v !== 'object' || Array.isArray(v)) throw permanent(`${key(meta)} has a non-object ${field}`);
    data[field] = v;
  }
  return { name: meta.name, of: key(meta), data };
}

function applyInto(copy, namespace) {
  actions.apply({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: copy.name,
      namespace,
      labels: { [REPLICA]: 'true' },
      annotations: { [REPLICA_OF]: copy.of },
    },
    ...copy.data,
  }, true);
}

/** Deletes every cached copy of `source` in a namespace `keep` accepts. */
function deleteCopies(source, keep) {
  const of = key(source);
  for (const copy of cache.list(kinds.ConfigMap, undefined, `${REPLICA}=true`)) {
    const meta = copy.meta();
    if (annotation(meta, REPLICA_OF) === of && meta.namespace != null && keep(meta.namespace)) {
      actions.delete(objectRef(kinds.ConfigMap, meta), 'background');
      log.info('copy deleted', { copy: key(meta), source: of });
    }
  }
}

class ConfigReplicator {
  constructor(config) {
    const c = parseConfig(config, { sourceSelector: 'kubewasm.io/replicate=true', namespaceSelector: '' });
    this.source = Selector.parse(c.sourceSelector);
    this.namespaces = Selector.parse(c.namespaceSelector);
  }

  registration() {
    return registration({
      subscriptions: [
        subscription(kinds.ConfigMap, { deltas: ['added', 'updated', 'deleted', 'resync'], fields: ['/data', '/binaryData'] }),
        subscription(kinds.Namespace, { deltas: ['added', 'updated'], fields: ['/metadata/labels'] }),
      ],
      writes: [kinds.ConfigMap],
    });
  }

  handle(delta) {
    if (delta.deltaType === 'synced') return;
    if (isKind(delta, kinds.Namespace)) this.namespaceChanged(delta);
    else if (isKind(delta, kinds.ConfigMap)) this.configMapChanged(delta);
  }

  isSource(meta) {
    return label(meta, REPLICA) !== 'true' && this.source.matches(meta.labels);
  }

  /** The namespace selector for a source: its annotation or the config's. */
  selectorFor(source) {
    const text = annotation(source, REPLICATE_TO);
    if (text === undefined) return this.namespaces;
    try {
      return Selector.parse(text);
    } catch (e) {
      throw new Error(`${REPLICATE_TO} on ${key(source)}: ${e.message}`);
    }
  }

  configMapChanged(delta) {
    const [meta, object] = parts(delta);
    if (label(meta, REPLICA) === 'true') return;
    const source = this.isSource(meta);
    const type = delta.deltaType;
    if (type === 'deleted' && source) {
      deleteCopies(meta, () => true);
    } else if ((type === 'added' || type === 'resync' || type === 'updated') && source) {
      this.replicate(meta, object);
    } else if (type === 'updated') {
      const old = oldMeta(delta);
      if (old != null && this.isSource(old)) deleteCopies(meta, () => true);
    }
  }

  replicate(meta, object) {
    let selector;
    try {
      selector = this.selectorFor(meta);
    } catch (e) {
      throw permanent(e.message);
    }
    const copy = copyOf(meta, object);
    const namespaces = cache.list(kinds.Namespace, undefined, undefined).map((o) => o.meta());
    const targets = namespaces
      .filter((ns) => !isTerminating(ns) && ns.name !== meta.namespace && selector.matches(ns.labels))
      .map((ns) => ns.name);
    for (const ns of targets) applyInto(copy, ns);
    const stale = (ns) => !targets.includes(ns) && namespaces.some((n) => n.name === ns && !isTerminating(n));
    deleteCopies(meta, stale);
    log.debug('replicated', { source: copy.of, namespaces: targets.length });
  }

  namespaceChanged(delta) {
    const [ns] = parts(delta);
    if (delta.initial || isTerminating(ns)) return;
    const old = oldMeta(delta);
    const filter = this.source.isEmpty() ? undefined : this.source.toString();
    for (const source of cache.list(kinds.ConfigMap, undefined, filter)) {
      const meta = source.meta();
      if (!this.isSource(meta) || meta.namespace === ns.name) continue;
      let selector;
      try {
        selector = this.selectorFor(meta);
      } catch (e) {
        log.warn('source skipped', { source: key(meta), error: e.message });
        continue;
      }
      const now = selector.matches(ns.labels);
      const before = old != null && selector.matches(old.labels);
      if (now && !before) applyInto(copyOf(meta, source), ns.name);
      else if (before && !now) deleteCopies(meta, (n) => n === ns.name);
    }
  }
}

export const handler = definePlugin(ConfigReplicator);
