"""config-replicator in Python: the same config, registration and actions
as plugins/config-replicator (see its README.md)."""

import kubewasm
from kubewasm import (
    DeltaType, Permanent, Selector, actions, annotation, cache, field_json, is_kind, is_terminating,
    key, kinds, label, log, object_ref, old_meta, parse_config, parts, registration, subscription,
)

REPLICA = "kubewasm.io/replica"
REPLICA_OF = "kubewasm.io/replica-of"
REPLICATE_TO = "kubewasm.io/replicate-to"

_ABSENT = object()


class Copy:
    """What a copy is made of: the source's name, key, data and binaryData."""

    def __init__(self, meta, source):
        self.name = meta.name
        self.of = key(meta)
        self.data = {}
        for field, pointer in (("binaryData", "/binaryData"), ("data", "/data")):
            v = field_json(source, pointer, _ABSENT)
            if v is _ABSENT or v is None:
                continue
            if not isinstance(v, dict):
                raise Permanent(f"{self.of} has a non-object {field}")
            self.data[field] = v

    def apply_into(self, namespace):
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {REPLICA: "true"},
                "annotations": {REPLICA_OF: self.of},
            },
        }
        obj.update(self.data)
        actions.apply(obj, True)


def delete_copies(source, keep):
    """Deletes every cached copy of ``source`` in a namespace ``keep`` accepts."""
    of = key(source)
    for copy in cache.list(kinds.ConfigMap, None, f"{REPLICA}=true"):
        meta = copy.meta()
        if annotation(meta, REPLICA_OF) == of and meta.namespace is not None and keep(meta.namespace):
            actions.delete(object_ref(kinds.ConfigMap, meta))
            log.info("copy deleted", copy=key(meta), source=of)


class ConfigReplicator(kubewasm.Plugin):
    def __init__(self, config):
        c = parse_config(config, {"sourceSelector": "kubewasm.io/replicate=true", "namespaceSelector": ""})
        self.source = Selector.parse(c["sourceSelector"])
        self.namespaces = Selector.parse(c["namespaceSelector"])

    def registration(self):
        return registration(
            subscriptions=[
                subscription(kinds.ConfigMap,
                             deltas=[DeltaType.ADDED, DeltaType.UPDATED, DeltaType.DELETED, DeltaType.RESYNC],
                             fields=["/data", "/binaryData"]),
                subscription(kinds.Namespace, deltas=[DeltaType.ADDED, DeltaType.UPDATED],
                             fields=["/metadata/labels"]),
            ],
            writes=[kinds.ConfigMap],
        )

    def handle(self, delta):
        if delta.delta_type == DeltaType.SYNCED:
            return
        if is_kind(delta, kinds.Namespace):
            self.namespace_changed(delta)
        elif is_kind(delta, kinds.ConfigMap):
            self.config_map_changed(delta)

    def is_source(self, meta):
        return label(meta, REPLICA) != "true" and self.source.matches(meta.labels)

    def selector_for(self, source):
        """The namespace selector for a source: its annotation or the config's."""
        text = annotation(source, REPLICATE_TO)
        if text is None:
            return self.namespaces
        try:
            return Selector.parse(text)
        except ValueError as e:
            raise ValueError(f"{REPLICATE_TO} on {key(source)}: {e}") from None

    def config_map_changed(self, delta):
        meta, obj = parts(delta)
        if label(meta, REPLICA) == "true":
            return
        source = self.is_source(meta)
        t = delta.delta_type
        if t == DeltaType.DELETED and source:
            delete_copies(meta, lambda _: True)
        elif t in (DeltaType.ADDED, DeltaType.RESYNC, DeltaType.UPDATED) and source:
            self.replicate(meta, obj)
        elif t == DeltaType.UPDATED:
            old = old_meta(delta)
            if old is not None and self.is_source(old):
                delete_copies(meta, lambda _: True)

    def replicate(self, meta, obj):
        try:
            selector = self.selector_for(meta)
        except ValueError as e:
            raise Permanent(str(e)) from None
        copy = Copy(meta, obj)
        namespaces = [o.meta() for o in cache.list(kinds.Namespace)]
        targets = [
            ns.name for ns in namespaces
            if not is_terminating(ns) and ns.name != meta.namespace and selector.matches(ns.labels)
        ]
        for ns in targets:
            copy.apply_into(ns)
        live = {n.name for n in namespaces if not is_terminating(n)}
        delete_copies(meta, lambda ns: ns not in targets and ns in live)
        log.debug("replicated", source=copy.of, namespaces=len(targets))

    def namespace_changed(self, delta):
        ns, _ = parts(delta)
        if delta.initial or is_terminating(ns):
            return
        old = old_meta(delta)
        selector_text = None if self.source.is_empty() else str(self.source)
        for source in cache.list(kinds.ConfigMap, None, selector_text):
            meta = source.meta()
            if not self.is_source(meta) or meta.namespace == ns.name:
                continue
            try:
                selector = self.selector_for(meta)
            except ValueError as e:
                log.warn("source skipped", source=key(meta), error=str(e))
                continue
            now = selector.matches(ns.labels)
            before = old is not None and selector.matches(old.labels)
            if now and not before:
                Copy(meta, source).apply_into(ns.name)
            elif before and not now:
                delete_copies(meta, lambda n: n == ns.name)


Handler = kubewasm.handler(ConfigReplicator)
