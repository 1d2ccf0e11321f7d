// Native unit tests of config-replicator through the SDK's fake host
// (`node --test` in plugins/js): no WebAssembly, no componentize, no host.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeHost } from '../sdk/fake.js';

const { handler } = await import('./index.js');

const SOURCE = {
  apiVersion: 'v1', kind: 'ConfigMap',
  metadata: { name: 'settings', namespace: 'default', labels: { 'kubewasm.io/replicate': 'true' } },
  data: { color: 'blue' },
};
const namespace = (name, labels) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } });
const copyIn = (ns, by) => ({
  apiVersion: 'v1', kind: 'ConfigMap',
  metadata: {
    name: 'settings', namespace: ns, labels: { 'kubewasm.io/replica': 'true' },
    annotations: { 'kubewasm.io/replica-of': 'default/settings', 'kubewasm.io/replicated-by': by },
  },
});

function load() {
  const host = new FakeHost();
  host.put(namespace('default', {})).put(namespace('team-a', { team: 'a' })).put(namespace('team-b', { team: 'b' }));
  host.load(handler, 'replicator', '{"namespaceSelector": "team"}');
  return host;
}

test('a source is copied into each matching namespace', () => {
  const host = load();
  const delta = host.added(SOURCE);
  assert.equal(delta.subscription, 0);
  assert.deepEqual(host.handle(delta), { tag: 'done' });
  const actions = [...host.actions];
  assert.deepEqual(host.takeActionLines(), [
    'apply ConfigMap team-a/settings force',
    'apply ConfigMap team-b/settings force',
  ]);
  assert.deepEqual(actions[0].object, {
    apiVersion: 'v1', kind: 'ConfigMap',
    metadata: {
      name: 'settings', namespace: 'team-a', labels: { 'kubewasm.io/replica': 'true' },
      annotations: { 'kubewasm.io/replica-of': 'default/settings', 'kubewasm.io/replicated-by': 'replicator' },
    },
    data: { color: 'blue' },
  });
  assert.equal(host.liveHandles(), 2, 'the two selectors the plugin keeps; every object handle is disposed');
});

test('a copy whose source is gone is deleted', () => {
  const host = load();
  host.put(SOURCE).put(copyIn('team-b', 'replicator'));
  // The source goes: each of this replicator's copies is deleted, guarded by its uid.
  host.handle(host.deleted(SOURCE));
  assert.deepEqual(host.takeActionLines(), ['delete ConfigMap team-b/settings background uid=uid-team-b-settings']);
  // A copy seen later with its source gone is an orphan; another
  // replicator's copy is left alone.
  host.handle(host.resync(copyIn('team-a', 'replicator')));
  host.handle(host.resync(copyIn('team-c', 'someone-else')));
  assert.deepEqual(host.takeActionLines(), ['delete ConfigMap team-a/settings background uid=uid-team-a-settings']);
  assert.equal(host.takeLogLines().at(-1), 'info orphan copy deleted copy=team-a/settings source=default/settings');
});
