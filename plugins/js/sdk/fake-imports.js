// The WIT imports of kubewasm:plugin@0.2.0 (cache, actions, selectors, log,
// clock) as the SDK sees them in a component built by componentize-qjs
// (options `null`, 64-bit integers numbers, errors thrown as their WIT
// variant), answered by the current FakeHost (fake.js). One module for
// every interface: the hook maps each `kubewasm:plugin/...` here.
import { currentHost } from './fake.js';
import { Selector } from './fake-selector.js';

const symbolDispose = Symbol.dispose || Symbol.for('dispose');

// cache
export const get = (kind, namespace, name) => currentHost().cacheGet(kind, namespace, name);
export const list = (kind, namespace, labelSelector) => currentHost().cacheList(kind, namespace, labelSelector);
export const byIndex = (index, value) => currentHost().cacheByIndex(index, value);

// actions
export const apply = (objectJson, force, pre) => currentHost().actApply('apply', objectJson, force, pre);
export const applyStatus = (objectJson, pre) => currentHost().actApply('apply-status', objectJson, false, pre);
export const patch = (target, patchType, text, pre) => currentHost().actPatch(target, patchType, text, pre);
const del = (target, propagation, pre) => currentHost().actDelete(target, propagation, pre);
export { del as delete };
export const recordEvent = (event) => currentHost().actEvent(event);

// log
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];
export const enabled = (level) => LEVELS.indexOf(level) >= LEVELS.indexOf(currentHost().logLevel);
export const write = (level, message, fields) => currentHost().logWrite(level, message, fields);

// clock
export const now = () => {
  const ms = currentHost().now;
  return { seconds: Math.floor(ms / 1000), nanoseconds: (ms % 1000) * 1e6 };
};
export const nowRfc3339 = () => new Date(Math.floor(currentHost().now / 1000) * 1000).toISOString().replace('.000Z', 'Z');

// selectors
export class LabelSelector {
  constructor(selector) {
    this.selector = selector;
    currentHost().handles.add(this);
  }

  static parse(text) {
    let selector;
    try {
      selector = new Selector(text);
    } catch (e) {
      throw e.message;
    }
    return new LabelSelector(selector);
  }

  live() {
    if (!currentHost().handles.has(this)) throw new Error('kubewasm fake host: label selector used after it was dropped');
    return this.selector;
  }

  matches(labels) {
    const m = new Map(labels);
    return this.live().matches((k) => m.get(k));
  }

  matchesObject(obj) {
    return this.matches(obj.labels());
  }

  toString() {
    return this.live().toString();
  }

  [symbolDispose]() {
    currentHost().handles.delete(this);
  }
}
