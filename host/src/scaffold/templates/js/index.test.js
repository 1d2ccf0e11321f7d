// A unit test of the hello plugin through the SDK's fake host (`node
// --test`, or `npm test`): no WebAssembly, no componentize, no host.
// sdk/fake.js stands in for the host: put objects into its cache, load the
// plugin, hand it deltas, then check the actions it emitted
// (takeActionLines, actions) and what it logged (takeLogLines).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeHost } from './sdk/fake.js';

// After the fake: it maps the plugin's WIT imports to itself.
const { handler } = await import('./index.js');

test('annotates each ConfigMap', () => {
  const host = new FakeHost();
  host.load(handler, '{{name}}');
  host.handle(host.added({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'greeting', namespace: 'demo' } }));
  assert.deepEqual(host.takeActionLines(), [
    'patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"{{name}}"}}} uid=uid-demo-greeting',
  ]);
  assert.deepEqual(host.takeLogLines(), ['info hello name=greeting']);
  assert.equal(host.liveHandles(), 0);
});
