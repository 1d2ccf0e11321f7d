// noop in JavaScript: plugins/testing/noop's twin (the floor of the
// per-delta overhead): subscribes to every Pod delta and does nothing.
import { definePlugin, kinds, registration, subscription } from '../sdk/kubewasm.js';

class Noop {
  registration() {
    return registration({
      subscriptions: [subscription(kinds.Pod, { deltas: ['added', 'updated', 'deleted', 'resync', 'synced'] })],
    });
  }

  handle() {}
}

export const handler = definePlugin(Noop);
