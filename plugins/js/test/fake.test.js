// The SDK's fake host itself (sdk/fake.js): cache reads, actions,
// registration checks, the clock, and label selectors against the same
// apimachinery golden cases as the host's parser.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { FakeHost } from '../sdk/fake.js';

const kw = await import('../sdk/kubewasm.js');
const { actions, cache, clock, kinds, log, objectOf, registration, subscription } = kw;

const cm = (ns, name, labels) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns, labels }, data: { k: 'v' } });

class Annotator {
  constructor(ctx) { this.name = ctx.name; }
  registration() {
    return registration({
      subscriptions: [
        subscription(kinds.ConfigMap, { labels: 'app=web', deltas: ['added'] }),
        subscription(kinds.ConfigMap),
        subscription(kinds.Pod, { cacheOnly: true }),
      ],
      writes: [kinds.ConfigMap],
      indexes: [kw.index('node', kinds.Pod, '/spec/nodeName')],
    });
  }
  handle(delta) {
    log.info('seen', { key: kw.key(delta) });
    if (delta.deltaType === 'deleted') {
      actions.delete(kw.objectRef(kinds.ConfigMap, delta), 'background', kw.preconditions.uid(delta.uid));
      throw kw.retry('try later');
    }
    const obj = objectOf(delta);
    actions.annotateObject(obj, { by: this.name });
    actions.eventAbout(obj, 'normal', 'Annotated', 'done');
    return kw.requeueAfter(30000);
  }
}

test('load, handle and the registration checks', () => {
  const host = new FakeHost();
  host.load(kw.definePlugin(Annotator), 'ann');
  const d = host.added(cm('a', 'web', { app: 'web' }));
  assert.equal(d.subscription, 0);
  assert.deepEqual(host.handle(d), { tag: 'requeue-after', val: 30000 });
  assert.deepEqual(host.takeActionLines(), [
    'patch ConfigMap a/web merge {"metadata":{"annotations":{"by":"ann"}}} uid=uid-a-web',
    'event ConfigMap a/web Normal Annotated: done uid=uid-a-web',
  ]);
  assert.equal(host.liveHandles(), 0, 'the SDK disposed every handle');
  const u = host.updated(cm('a', 'web', { app: 'api' }));
  assert.deepEqual([u.subscription, u.resourceVersion], [1, '2']);
  assert.equal(u.oldObject.label('app'), 'web');
  assert.throws(() => host.handle(host.deleted(cm('a', 'web', {}))), { tag: 'retry', message: 'try later' });
  assert.deepEqual(host.actions, [], "a failed call's actions are dropped");
  assert.deepEqual(host.takeLogLines(), ['info seen key=a/web', 'info seen key=a/web']);
  assert.throws(() => cache.list(kinds.Namespace), /not subscribed/);
  assert.throws(() => actions.delete(kw.objectRef(kinds.Pod, 'a', 'p')), /not declared/);
  assert.throws(() => actions.apply({ kind: 'ConfigMap' }), /apiVersion, kind and metadata.name/);
  host.put({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'a' }, spec: { nodeName: 'n1' } });
  assert.deepEqual(cache.byIndex('node', 'n1').map((o) => o.name()), ['p']);
  assert.throws(() => cache.byIndex('owner', 'x'), /unknown index/);
  assert.throws(() => host.load(kw.definePlugin(class { constructor() { throw new Error('refused'); } })), /refused/);
});

test('cache reads and objects', () => {
  const host = new FakeHost();
  host.put(cm('b', 'two', { app: 'web', tier: 'db' })).put(cm('a', 'one', { app: 'web' })).put({
    apiVersion: 'v1', kind: 'Namespace',
    metadata: {
      name: 'a', generation: 3, managedFields: [{}],
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: 'n', uid: 'u', controller: true }],
    },
    spec: { n: 1, f: 1.5, list: [1, 2] },
  });
  assert.deepEqual(cache.list(kinds.ConfigMap).map(kw.key), ['a/one', 'b/two']);
  assert.deepEqual(cache.list(kinds.ConfigMap, undefined, 'tier notin (db)').map(kw.key), ['a/one']);
  assert.deepEqual(cache.list(kw.resource('configmaps'), 'b', 'app').map(kw.key), ['b/two']);
  assert.throws(() => cache.list(kinds.ConfigMap, undefined, 'a in b'), /invalid selector/);
  const ns = cache.get(kinds.Namespace, undefined, 'a');
  assert.equal(ns.namespace(), null);
  assert.equal(ns.generation(), 3);
  assert.deepEqual(ns.field('/spec/n'), { tag: 'integer', val: 1 });
  assert.deepEqual(ns.field('/spec/f'), { tag: 'float', val: 1.5 });
  assert.deepEqual(kw.fieldJson(ns, '/spec/list'), [1, 2]);
  assert.equal(ns.controller().name, 'n');
  assert.ok(!ns.toJson().includes('managedFields') && !ns.toJson().includes('annotations'));
  const one = cache.get(kinds.ConfigMap, 'a', 'one');
  host.put(cm('a', 'one', { app: 'api' }));
  assert.equal(one.label('app'), 'web', 'a handle is a snapshot');
  const again = cache.get(kinds.ConfigMap, 'a', 'one');
  assert.deepEqual([again.uid(), again.resourceVersion()], ['uid-a-one', '2']);
  assert.equal(clock.nowRfc3339(), '2026-01-01T00:00:00Z');
  host.setTime('2024-02-29T23:59:59Z');
  host.advance(1500);
  assert.equal(clock.nowRfc3339(), '2024-03-01T00:00:00Z');
  host.logLevel = 'info';
  log.debug('hidden');
  assert.ok(!log.enabled('debug'));
  assert.deepEqual(host.logs, []);
});

test('label selectors agree with the apimachinery golden cases', () => {
  new FakeHost();
  const golden = readFileSync(new URL('../../../host/src/informer/selector_golden.jsonl', import.meta.url), 'utf8');
  const lines = golden.split('\n').filter((l) => l !== '' && !l.startsWith('#'));
  const sets = JSON.parse(lines[0]).label_sets;
  for (const line of lines.slice(1)) {
    const [text, canonical, want] = JSON.parse(line);
    let sel;
    try {
      sel = kw.LabelSelector.parse(text);
    } catch {
      assert.equal(canonical, null, `${JSON.stringify(text)}: refused, apimachinery gives ${canonical}`);
      continue;
    }
    assert.notEqual(canonical, null, `${JSON.stringify(text)}: parsed as ${sel.toString()}, apimachinery refuses it`);
    assert.equal(sel.toString(), canonical, JSON.stringify(text));
    const got = sets.map((s) => (sel.matches(Object.entries(s)) ? '1' : '0')).join('');
    assert.equal(got, want, `${JSON.stringify(text)} matches`);
  }
  assert.ok(lines.length > 1000);
});
