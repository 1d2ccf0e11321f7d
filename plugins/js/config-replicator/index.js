// config-replicator in JavaScript: the same config, registration and
// actions as plugins/config-replicator (see its README.md).
import {
  LabelSelector, actions, annotation, cache, definePlugin, fieldJson, isTerminating, key, kinds,
  label, log, objectOf, objectRef, permanent, preconditions, registration, subscription,
} from '../sdk/kubewasm.js';

/** Label on every copy; objects carrying it are never replicated. */
const REPLICA = 'kubewasm.io/replica';
/** Annotation on every copy: `<namespace>/<name>` of its source. */
const REPLICA_OF = 'kubewasm.io/replica-of';
/**
 * Annotation on every copy: the name of the plugin that made it. A
 * replicator deletes only its own copies, so replicators with different
 * selectors share a cluster.
 */
const REPLICATED_BY = 'kubewasm.io/replicated-by';
/** Annotation on a source overriding the configured namespace selector. */
const REPLICATE_TO = 'kubewasm.io/replicate-to';

/** Subscription indexes, in registration order. */
const CONFIG_MAPS = 0;
const NAMESPACES = 1;

/** `by`'s copy of `source` (an object), named `name`, whose key is `of`: its data and binaryData. */
function copyOf(name, of, by, source) {
  const data = {};
  for (const [field, pointer] of [['binaryData', '/binaryData'], ['data', '/data']]) {
    const v = fieldJson(source, pointer);
    if (v == null) continue;
    if (typeof v !== 'object' || Array.isArray(v)) throw permanent(`${of} has a non-object ${field}`);
    data[field] = v;
  }
  return { name, of, by, data };
}

function applyInto(copy, namespace) {
  actions.apply({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: copy.name,
      namespace,
      labels: { [REPLICA]: 'true' },
      annotations: { [REPLICA_OF]: copy.of, [REPLICATED_BY]: copy.by },
    },
    ...copy.data,
  }, true, preconditions.none());
}

const isReplica = (object) => label(object, REPLICA) === 'true';

/**
 * Deletes (background, guarded by the copy's uid) every cached copy `me`
 * made of the source whose key is `of` in a namespace `keep` accepts, in
 * namespace order.
 */
function deleteCopies(me, of, keep) {
  for (const copy of cache.list(kinds.ConfigMap, undefined, `${REPLICA}=true`)) {
    const ns = copy.namespace();
    if (annotation(copy, REPLICA_OF) === of && annotation(copy, REPLICATED_BY) === me
      && ns != null && keep(ns)) {
      actions.delete(objectRef(kinds.ConfigMap, copy), 'background', preconditions.uid(copy.uid()));
      log.info('copy deleted', { copy: key(copy), source: of });
    }
  }
}

class ConfigReplicator {
  constructor(ctx) {
    // This plugin's name, recorded on its copies.
    this.me = ctx.name;
    const c = ctx.parseConfig({ sourceSelector: 'kubewasm.io/replicate=true', namespaceSelector: '' });
    const parse = (name, text) => {
      try {
        return LabelSelector.parse(text);
      } catch (e) {
        throw new Error(`invalid config: ${name}: ${e.message}`);
      }
    };
    this.source = parse('sourceSelector', c.sourceSelector);
    this.namespaces = parse('namespaceSelector', c.namespaceSelector);
    // The filter of the cache lists of sources (undefined: everything).
    const text = this.source.toString();
    this.sourceFilter = text === '' ? undefined : text;
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
    if (delta.subscription === NAMESPACES) this.namespaceChanged(delta);
    else if (delta.subscription === CONFIG_MAPS) this.configMapChanged(delta);
  }

  isSource(object) {
    return !isReplica(object) && this.source.matchesObject(object);
  }

  /**
   * The namespace selector a source names in its annotation, parsed
   * (undefined: it names none, the config's applies); throws an Error.
   */
  static ownSelector(source) {
    const text = annotation(source, REPLICATE_TO);
    if (text === undefined) return undefined;
    try {
      return LabelSelector.parse(text);
    } catch (e) {
      throw new Error(`${REPLICATE_TO} on ${key(source)}: ${e.message}`);
    }
  }

  configMapChanged(delta) {
    const object = objectOf(delta);
    if (isReplica(object)) {
      this.copySeen(delta, object);
      return;
    }
    const source = this.isSource(object);
    const type = delta.deltaType;
    if (type === 'deleted' && source) {
      deleteCopies(this.me, key(delta), () => true);
    } else if ((type === 'added' || type === 'resync' || type === 'updated') && source) {
      this.replicate(delta, object);
    } else if (type === 'updated' && delta.oldObject != null && this.isSource(delta.oldObject)) {
      // No longer a source (labels changed): its copies go.
      deleteCopies(this.me, key(delta), () => true);
    }
  }

  /**
   * A copy of ours whose source is gone (or no longer a source) is deleted.
   * Level, not edge: a source deleted while no replica led (a leadership
   * handover, a restart) never arrives as a delete; the next leader's replay
   * of the copies finds the orphans.
   */
  copySeen(delta, copy) {
    if (delta.deltaType === 'deleted' || annotation(copy, REPLICATED_BY) !== this.me) return;
    const of = annotation(copy, REPLICA_OF);
    if (of === undefined) return;
    const slash = of.indexOf('/');
    if (slash < 0) return;
    const ns = of.slice(0, slash);
    const name = of.slice(slash + 1);
    const source = cache.get(kinds.ConfigMap, ns, name);
    const live = source !== undefined && this.isSource(source);
    if (!live) {
      actions.delete(objectRef(kinds.ConfigMap, delta), 'background', preconditions.uid(delta.uid));
      log.info('orphan copy deleted', { copy: key(delta), source: `${ns}/${name}` });
    }
  }

  /**
   * Applies the source into each target namespace (by name), then deletes
   * its copies in namespaces that exist, are not terminating and are no
   * longer targets.
   */
  replicate(delta, object) {
    let own;
    try {
      own = ConfigReplicator.ownSelector(object);
    } catch (e) {
      throw permanent(e.message);
    }
    const selector = own ?? this.namespaces;
    const copy = copyOf(delta.name, key(delta), this.me, object);
    // The live (not terminating) namespaces, by name, and whether each
    // matches the source's selector.
    const live = cache.list(kinds.Namespace, undefined, undefined)
      .filter((ns) => !isTerminating(ns))
      .map((ns) => [ns.name(), selector.matchesObject(ns)]);
    const targets = live
      .filter(([name, matches]) => matches && name !== delta.namespace)
      .map(([name]) => name);
    for (const ns of targets) applyInto(copy, ns);
    const stale = (ns) => !targets.includes(ns) && live.some(([name]) => name === ns);
    deleteCopies(this.me, copy.of, stale);
    log.debug('replicated', { source: copy.of, namespaces: targets.length });
  }

  /**
   * A live namespace appeared or changed labels: copies every source it now
   * matches (and did not before) into it, and deletes the copies of sources
   * it no longer matches. Initial namespaces are covered by the sources' own
   * initial deltas.
   */
  namespaceChanged(delta) {
    const ns = objectOf(delta);
    if (delta.initial || isTerminating(ns)) return;
    const name = delta.name;
    for (const source of cache.list(kinds.ConfigMap, undefined, this.sourceFilter)) {
      if (!this.isSource(source) || source.namespace() === name) continue;
      let own;
      try {
        own = ConfigReplicator.ownSelector(source);
      } catch (e) {
        log.warn('source skipped', { source: key(source), error: e.message });
        continue;
      }
      const selector = own ?? this.namespaces;
      const now = selector.matchesObject(ns);
      const before = delta.oldObject != null && selector.matchesObject(delta.oldObject);
      if (own !== undefined) own.dispose();
      if (now && !before) applyInto(copyOf(source.name(), key(source), this.me, source), name);
      else if (before && !now) deleteCopies(this.me, key(source), (n) => n === name);
    }
  }
}

export const handler = definePlugin(ConfigReplicator);
