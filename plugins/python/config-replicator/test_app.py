"""Native unit tests of config-replicator through the SDK's fake host
(`python -m pytest` in plugins/python): no WebAssembly, no host."""

import app

SOURCE = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "settings", "namespace": "default", "labels": {"kubewasm.io/replicate": "true"}},
    "data": {"color": "blue"},
}


def namespace(name, labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def copy_in(ns, by):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "settings", "namespace": ns, "labels": {"kubewasm.io/replica": "true"},
        "annotations": {"kubewasm.io/replica-of": "default/settings", "kubewasm.io/replicated-by": by}}}


def load(host):
    host.put(namespace("default", {})).put(namespace("team-a", {"team": "a"})).put(namespace("team-b", {"team": "b"}))
    host.load(app.Handler, "replicator", '{"namespaceSelector": "team"}')


def test_a_source_is_copied_into_each_matching_namespace(fake_host):
    load(fake_host)
    delta = fake_host.added(SOURCE)
    assert delta.subscription == app.CONFIG_MAPS
    fake_host.handle(delta)
    actions = fake_host.take_actions()
    assert [str(a) for a in actions] == [
        "apply ConfigMap team-a/settings force",
        "apply ConfigMap team-b/settings force",
    ]
    assert actions[0].object == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "settings", "namespace": "team-a", "labels": {"kubewasm.io/replica": "true"},
            "annotations": {"kubewasm.io/replica-of": "default/settings", "kubewasm.io/replicated-by": "replicator"},
        },
        "data": {"color": "blue"},
    }


def test_a_copy_whose_source_is_gone_is_deleted(fake_host):
    load(fake_host)
    fake_host.put(SOURCE).put(copy_in("team-b", "replicator"))
    # The source goes: each of this replicator's copies is deleted, guarded by its uid.
    fake_host.handle(fake_host.deleted(SOURCE))
    assert fake_host.take_action_lines() == ["delete ConfigMap team-b/settings background uid=uid-team-b-settings"]
    # A copy seen later with its source gone is an orphan; another
    # replicator's copy is left alone.
    fake_host.handle(fake_host.resync(copy_in("team-a", "replicator")))
    fake_host.handle(fake_host.resync(copy_in("team-c", "someone-else")))
    assert fake_host.take_action_lines() == ["delete ConfigMap team-a/settings background uid=uid-team-a-settings"]
    assert str(fake_host.logs[-1]) == "info orphan copy deleted copy=team-a/settings source=default/settings"
