// {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas and
// annotates each ConfigMap with `kubewasm.io/hello: {{name}}`.
import { actions, definePlugin, kinds, log, objectRef, parts, registration, subscription } from './sdk/kubewasm.js';

class Hello {
  constructor(_config) {}

  registration() {
    return registration({
      subscriptions: [subscription(kinds.ConfigMap, { deltas: ['added'] })],
      writes: [kinds.ConfigMap],
    });
  }

  handle(delta) {
    const [meta] = parts(delta);
    log.info('hello', { name: meta.name });
    actions.patchMerge(objectRef(kinds.ConfigMap, meta), {
      metadata: { annotations: { 'kubewasm.io/hello': '{{name}}' } },
    });
  }
}

export const handler = definePlugin(Hello);
