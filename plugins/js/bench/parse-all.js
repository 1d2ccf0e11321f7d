// parse-all in JavaScript: plugins/testing/parse-all's twin (see its
// README.md and plugins/bench-logic): per Pod delta, the whole object from
// `toJson()` parsed with JSON.parse, the same decision as
// bench_logic::evaluate and its merge patch, when there is one, as the only
// action. Config `{"repeat": N}` (default 1) runs the decision N times.
import {
  actions, definePlugin, kinds, objectOf, objectRef, permanent, preconditions, registration, subscription,
} from '../sdk/kubewasm.js';

const ANNOTATION = 'kubewasm.io/health';

const hasMemoryLimit = (c) => c.resources?.limits?.memory !== undefined;

/**
 * bench_logic::evaluate: the merge patch (text) reporting restarts,
 * containers without a memory limit and a phase other than Running or
 * Succeeded, or undefined when there is nothing to report.
 */
function evaluate(json) {
  let pod;
  try {
    pod = JSON.parse(json);
  } catch (e) {
    throw permanent(`not a Pod: ${e.message}`);
  }
  if (pod === null || typeof pod !== 'object' || Array.isArray(pod)) throw permanent('not a Pod: not an object');
  const spec = pod.spec ?? {};
  const status = pod.status ?? {};
  let restarts = 0;
  for (const c of [...(status.containerStatuses ?? []), ...(status.initContainerStatuses ?? [])]) {
    restarts += c.restartCount;
  }
  const unlimited = [...(spec.containers ?? []), ...(spec.initContainers ?? [])]
    .filter((c) => !hasMemoryLimit(c))
    .map((c) => c.name);
  const phase = status.phase ?? 'Unknown';
  if (restarts === 0 && unlimited.length === 0 && (phase === 'Running' || phase === 'Succeeded')) return undefined;
  const node = spec.nodeName ?? '-';
  const summary = `phase=${phase} node=${node} restarts=${restarts} unlimited=${unlimited.length === 0 ? '-' : unlimited.join(',')}`;
  return JSON.stringify({ metadata: { annotations: { [ANNOTATION]: summary } } });
}

class ParseAll {
  constructor(ctx) {
    const { repeat } = ctx.parseConfig({ repeat: 1 });
    if (!Number.isInteger(repeat) || repeat < 0) throw new Error(`invalid config: repeat must be a count, not ${repeat}`);
    this.repeat = repeat;
  }

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
    const json = objectOf(delta).toJson();
    let decided;
    for (let i = 0; i < this.repeat; i++) decided = evaluate(json);
    if (decided !== undefined) {
      actions.patch(objectRef(kinds.Pod, delta), 'merge', decided, preconditions.uid(delta.uid));
    }
  }
}

export const handler = definePlugin(ParseAll);
