// realistic in JavaScript: plugins/testing/realistic's twin (see its
// README.md): per Pod delta, label `app`, two fields in one host call, the
// Pod's Node from the cache, and one merge patch annotating the Pod with
// the Node's zone. No JSON is parsed.
import {
  actions, cache, definePlugin, kinds, label, objectOf, objectRef, preconditions, registration, subscription,
} from '../sdk/kubewasm.js';

const ZONE_LABEL = 'topology.kubernetes.io/zone';
const ZONE_ANNOTATION = 'kubewasm.io/zone';
const POINTERS = ['/spec/nodeName', '/status/phase'];

/** A field value's text, if it is a string. */
const text = (v) => (v != null && v.tag === 'text' ? v.val : undefined);

class Realistic {
  registration() {
    return registration({
      subscriptions: [
        subscription(kinds.Pod, { deltas: ['added', 'updated', 'resync'] }),
        subscription(kinds.Node, { cacheOnly: true }),
      ],
      writes: [kinds.Pod],
    });
  }

  handle(delta) {
    if (delta.deltaType === 'synced') return;
    const pod = objectOf(delta);
    // Read like a real handler would, used by none (as in the Rust plugin).
    label(pod, 'app');
    const [node] = pod.fields(POINTERS).map(text);
    let zone;
    if (node !== undefined) {
      const n = cache.get(kinds.Node, undefined, node);
      if (n !== undefined) zone = label(n, ZONE_LABEL);
    }
    actions.annotate(objectRef(kinds.Pod, delta), { [ZONE_ANNOTATION]: zone ?? 'unknown' }, preconditions.uid(delta.uid));
  }
}

export const handler = definePlugin(Realistic);
