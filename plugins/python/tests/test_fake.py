"""The SDK's fake host itself (sdk/kubewasm_fake.py): cache reads, actions,
registration checks, the clock, and label selectors against the same
apimachinery golden cases as the host's parser."""

import json
import pathlib

import pytest

import kubewasm
from kubewasm import DONE, actions, cache, clock, kinds, log, object_of, registration, subscription


def cm(ns, name, labels):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {"k": "v"}}


class Annotator(kubewasm.Plugin):
    def registration(self):
        return registration(
            subscriptions=[subscription(kinds.ConfigMap, labels="app=web", deltas=["added"]),
                           subscription(kinds.ConfigMap),
                           kubewasm.cache_only(kinds.Pod)],
            writes=[kinds.ConfigMap],
            indexes=[kubewasm.index("node", kinds.Pod, "/spec/nodeName")],
        )

    def handle(self, delta):
        log.info("seen", key=kubewasm.key(delta))
        if delta.delta_type == kubewasm.DeltaType.DELETED:
            actions.delete(kubewasm.object_ref(kinds.ConfigMap, delta), "background",
                           kubewasm.preconditions(uid=delta.uid))
            raise kubewasm.Retry("try later")
        obj = object_of(delta)
        actions.annotate_object(obj, {"by": self.context.name})
        actions.event_about(obj, "Normal", "Annotated", "done")
        return kubewasm.requeue_after_ms(30_000)


def test_load_handle_and_registration_checks(fake_host):
    fake_host.load(kubewasm.handler(Annotator), "ann")
    d = fake_host.added(cm("a", "web", {"app": "web"}))
    assert d.subscription == 0
    assert fake_host.handle(d).value == 30_000
    assert fake_host.take_action_lines() == [
        'patch ConfigMap a/web merge {"metadata":{"annotations":{"by":"ann"}}} uid=uid-a-web',
        "event ConfigMap a/web Normal Annotated: done uid=uid-a-web",
    ]
    d = fake_host.updated(cm("a", "web", {"app": "api"}))
    assert (d.subscription, d.resource_version) == (1, "2")
    assert d.old_object.label("app") == "web"
    with pytest.raises(kubewasm.Retry, match="try later"):
        fake_host.handle(fake_host.deleted(cm("a", "web", {})))
    assert fake_host.actions == [], "a failed call's actions are dropped"
    assert [str(line) for line in fake_host.take_logs()] == ["info seen key=a/web", "info seen key=a/web"]
    with pytest.raises(kubewasm.Permanent, match="not subscribed"):
        cache.list(kinds.Namespace)
    with pytest.raises(kubewasm.Permanent, match="not declared"):
        actions.delete(kubewasm.object_ref(kinds.Pod, "a", "p"))
    with pytest.raises(kubewasm.Permanent, match="apiVersion, kind and metadata.name"):
        actions.apply({"kind": "ConfigMap"})
    fake_host.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
                   "spec": {"nodeName": "n1"}})
    assert [o.name() for o in cache.by_index("node", "n1")] == ["p"]
    with pytest.raises(kubewasm.Permanent):
        cache.by_index("owner", "x")
    with pytest.raises(ValueError, match="refused"):
        class Refuses(kubewasm.Plugin):
            def __init__(self, ctx):
                raise ValueError("refused")
        fake_host.load(kubewasm.handler(Refuses))


def test_cache_reads_and_objects(fake_host):
    fake_host.put(cm("b", "two", {"app": "web", "tier": "db"})).put(cm("a", "one", {"app": "web"})).put({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "a", "generation": 3, "managedFields": [{}],
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u",
                                          "controller": True}]},
        "spec": {"n": 1, "f": 1.5, "list": [1, 2]},
    })
    assert [kubewasm.key(o) for o in cache.list(kinds.ConfigMap)] == ["a/one", "b/two"]
    assert [kubewasm.key(o) for o in cache.list(kinds.ConfigMap, None, "tier notin (db)")] == ["a/one"]
    assert [kubewasm.key(o) for o in cache.list(kubewasm.resource("configmaps"), "b", "app")] == ["b/two"]
    with pytest.raises(kubewasm.Permanent, match="invalid selector"):
        cache.list(kinds.ConfigMap, None, "a in b")
    ns = cache.get(kinds.Namespace, None, "a")
    assert ns.namespace() is None and ns.generation() == 3
    assert kubewasm.field_json(ns, "/spec/n") == 1 and kubewasm.field_json(ns, "/spec/f") == 1.5
    assert kubewasm.field_json(ns, "/spec/list") == [1, 2]
    assert ns.controller().name == "n"
    assert "managedFields" not in ns.to_json() and "annotations" not in ns.to_json()
    one = cache.get(kinds.ConfigMap, "a", "one")
    fake_host.put(cm("a", "one", {"app": "api"}))
    assert one.label("app") == "web", "a handle is a snapshot"
    again = cache.get(kinds.ConfigMap, "a", "one")
    assert (again.uid(), again.resource_version()) == ("uid-a-one", "2")
    assert clock.now_rfc3339() == "2026-01-01T00:00:00Z"
    fake_host.set_time("2024-02-29T23:59:59Z")
    fake_host.advance(1.5)
    assert clock.now_rfc3339() == "2024-03-01T00:00:00Z"
    fake_host.set_log_level("info")
    log.debug("hidden")
    assert not log.enabled("debug") and fake_host.logs == []


def test_selectors_agree_with_apimachinery_golden(fake_host):
    golden = pathlib.Path(__file__).parents[3] / "host/src/informer/selector_golden.jsonl"
    lines = [line for line in golden.read_text().splitlines() if not line.startswith("#")]
    sets = json.loads(lines[0])["label_sets"]
    for line in lines[1:]:
        case = json.loads(line)
        text, canonical = case[0], case[1]
        try:
            sel = kubewasm.parse_selector(text)
        except ValueError:
            assert canonical is None, f"{text!r}: refused, apimachinery gives {canonical!r}"
            continue
        assert canonical is not None, f"{text!r}: parsed as {sel}, apimachinery refuses it"
        assert sel.to_string() == canonical, text
        got = "".join("1" if sel.matches(s) else "0" for s in sets)
        assert got == case[2], f"{text!r} matches"
    assert len(lines) > 1000
