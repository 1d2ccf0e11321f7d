// {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas and
// annotates each ConfigMap with `kubewasm.io/hello: {{name}}`.
// SDK reference: sdk/kubewasm.js (JSDoc) and sdk/kubewasm.d.ts.
import { actions, definePlugin, kinds, log, objectRef, preconditions, registration, subscription } from './sdk/kubewasm.js';

class Hello {
  // ctx: {name, version, config, fieldManager, parseConfig(defaults)}.
  constructor(ctx) {
    this.name = ctx.name;
  }

  registration() {
    return registration({
      subscriptions: [subscription(kinds.ConfigMap, { deltas: ['added'] })],
      writes: [kinds.ConfigMap],
    });
  }

  // Return nothing (done) or requeueAfter(ms); throw retry(..) or permanent(..).
  handle(delta) {
    log.info('hello', { name: delta.name });
    // A merge patch of the ConfigMap, only if it is still the one this delta
    // is about (its uid).
    actions.annotate(objectRef(kinds.ConfigMap, delta), { 'kubewasm.io/hello': '{{name}}' }, preconditions.uid(delta.uid));
  }
}

export const handler = definePlugin(Hello);
