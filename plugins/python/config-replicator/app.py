"""config-replicator in Python: copies source ConfigMaps (matching a label
selector) into every namespace matching another selector, keeps the copies
in step with their source, and deletes them when the source goes. The same
config, registration and actions as plugins/config-replicator (Rust; see
its README.md)."""

from typing import Callable, Dict, List, Optional, Tuple

import kubewasm
from kubewasm import (
    DeltaType, Delta, Object, Permanent, Selector, actions, cache, field_json, key, kinds, log, object_ref,
    object_of, parse_config, preconditions, registration, subscription,
)

#: Label on every copy; objects carrying it are never replicated.
REPLICA = "kubewasm.io/replica"
#: Annotation on every copy: ``<namespace>/<name>`` of its source.
REPLICA_OF = "kubewasm.io/replica-of"
#: Annotation on every copy: the name of the plugin that made it. A
#: replicator deletes only its own copies, so replicators with different
#: selectors share a cluster.
REPLICATED_BY = "kubewasm.io/replicated-by"
#: Annotation on a source overriding the configured namespace selector.
REPLICATE_TO = "kubewasm.io/replicate-to"

#: Subscription indexes, in registration order.
CONFIG_MAPS = 0
NAMESPACES = 1

_ABSENT = object()


class Copy:
    """What a copy is made of: the source's name, key, data and binaryData,
    and the replicator that makes it."""

    def __init__(self, name: str, of: str, by: str, source: Object) -> None:
        self.name = name
        self.of = of
        self.by = by
        self.data: Dict[str, dict] = {}
        for field, pointer in (("binaryData", "/binaryData"), ("data", "/data")):
            v = field_json(source, pointer, _ABSENT)
            if v is _ABSENT or v is None:
                continue
            if not isinstance(v, dict):
                raise Permanent(f"{of} has a non-object {field}")
            self.data[field] = v

    def apply_into(self, namespace: str) -> None:
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {REPLICA: "true"},
                "annotations": {REPLICA_OF: self.of, REPLICATED_BY: self.by},
            },
        }
        obj.update(self.data)
        actions.apply(obj, force=True)


def is_replica(obj: Object) -> bool:
    return obj.label(REPLICA) == "true"


def delete_copies(me: str, of: str, keep: Callable[[str], bool]) -> None:
    """Deletes (background, guarded by the copy's uid) every cached copy
    ``me`` made of the source whose key is ``of`` in a namespace ``keep``
    accepts, in namespace order."""
    for copy in cache.list(kinds.ConfigMap, None, f"{REPLICA}=true"):
        ns = copy.namespace()
        if (copy.annotation(REPLICA_OF) == of and copy.annotation(REPLICATED_BY) == me
                and ns is not None and keep(ns)):
            actions.delete(object_ref(kinds.ConfigMap, copy), "background", preconditions(uid=copy.uid()))
            log.info("copy deleted", copy=key(copy), source=of)


class ConfigReplicator(kubewasm.Plugin):
    def __init__(self, ctx: kubewasm.Context) -> None:
        # This plugin's name, recorded on its copies.
        self.me = ctx.name
        c = parse_config(ctx, {"sourceSelector": "kubewasm.io/replicate=true", "namespaceSelector": ""})
        try:
            self.source = Selector.parse(c["sourceSelector"])
        except ValueError as e:
            raise ValueError(f"invalid config: sourceSelector: {e}") from None
        try:
            self.namespaces = Selector.parse(c["namespaceSelector"])
        except ValueError as e:
            raise ValueError(f"invalid config: namespaceSelector: {e}") from None
        # The filter of the cache lists of sources (None for the empty selector).
        self.source_filter: Optional[str] = self.source.to_string() or None

    def registration(self) -> kubewasm.Registration:
        return registration(
            subscriptions=[
                subscription(kinds.ConfigMap, deltas=["added", "updated", "deleted", "resync"],
                             fields=["/data", "/binaryData"]),
                subscription(kinds.Namespace, deltas=["added", "updated"], fields=["/metadata/labels"]),
            ],
            writes=[kinds.ConfigMap],
        )

    def handle(self, delta: Delta) -> None:
        if delta.delta_type == DeltaType.SYNCED:
            return
        if delta.subscription == NAMESPACES:
            self.namespace_changed(delta)
        elif delta.subscription == CONFIG_MAPS:
            self.config_map_changed(delta)

    def is_source(self, obj: Object) -> bool:
        return not is_replica(obj) and self.source.matches_object(obj)

    @staticmethod
    def own_selector(source: Object) -> Optional[Selector]:
        """The namespace selector a source names in its annotation, parsed
        (``None``: it names none, the config's applies); ValueError when it
        does not parse."""
        text = source.annotation(REPLICATE_TO)
        if text is None:
            return None
        try:
            return Selector.parse(text)
        except ValueError as e:
            raise ValueError(f"{REPLICATE_TO} on {key(source)}: {e}") from None

    def config_map_changed(self, delta: Delta) -> None:
        obj = object_of(delta)
        if is_replica(obj):
            self.copy_seen(delta, obj)
            return
        source = self.is_source(obj)
        t = delta.delta_type
        if t == DeltaType.DELETED and source:
            delete_copies(self.me, key(delta), lambda _: True)
        elif t in (DeltaType.ADDED, DeltaType.RESYNC, DeltaType.UPDATED) and source:
            self.replicate(delta, obj)
        elif t == DeltaType.UPDATED and delta.old_object is not None and self.is_source(delta.old_object):
            # No longer a source (labels changed): its copies go.
            delete_copies(self.me, key(delta), lambda _: True)

    def copy_seen(self, delta: Delta, copy: Object) -> None:
        """A copy of ours whose source is gone (or no longer a source) is
        deleted. Level, not edge: a source deleted while no replica led (a
        leadership handover, a restart) never arrives as a delete; the next
        leader's replay of the copies finds the orphans."""
        if delta.delta_type == DeltaType.DELETED or copy.annotation(REPLICATED_BY) != self.me:
            return
        of = copy.annotation(REPLICA_OF)
        if of is None or "/" not in of:
            return
        ns, name = of.split("/", 1)
        source = cache.get(kinds.ConfigMap, ns, name)
        if source is None or not self.is_source(source):
            actions.delete(object_ref(kinds.ConfigMap, delta), "background", preconditions(uid=delta.uid))
            log.info("orphan copy deleted", copy=key(delta), source=f"{ns}/{name}")

    def replicate(self, delta: Delta, obj: Object) -> None:
        """Applies the source into each target namespace (by name), then
        deletes its copies in namespaces that exist, are not terminating and
        are no longer targets."""
        try:
            own = self.own_selector(obj)
        except ValueError as e:
            raise Permanent(str(e)) from None
        selector = own if own is not None else self.namespaces
        copy = Copy(delta.name, key(delta), self.me, obj)
        # The live (not terminating) namespaces, by name, and whether each
        # matches the source's selector.
        live: List[Tuple[str, bool]] = [
            (ns.name(), selector.matches_object(ns))
            for ns in cache.list(kinds.Namespace)
            if ns.deletion_timestamp() is None
        ]
        targets = [name for name, matches in live if matches and name != delta.namespace]
        for ns in targets:
            copy.apply_into(ns)
        live_names = {name for name, _ in live}
        delete_copies(self.me, copy.of, lambda ns: ns not in targets and ns in live_names)
        log.debug("replicated", source=copy.of, namespaces=len(targets))

    def namespace_changed(self, delta: Delta) -> None:
        """A live namespace appeared or changed labels: copies every source
        it now matches (and did not before) into it, and deletes the copies
        of sources it no longer matches. Initial namespaces are covered by
        the sources' own initial deltas."""
        ns = object_of(delta)
        if delta.initial or ns.deletion_timestamp() is not None:
            return
        name = delta.name
        for source in cache.list(kinds.ConfigMap, None, self.source_filter):
            if not self.is_source(source) or source.namespace() == name:
                continue
            try:
                own = self.own_selector(source)
            except ValueError as e:
                log.warn("source skipped", source=key(source), error=str(e))
                continue
            selector = own if own is not None else self.namespaces
            now = selector.matches_object(ns)
            before = delta.old_object is not None and selector.matches_object(delta.old_object)
            if now and not before:
                Copy(source.name(), key(source), self.me, source).apply_into(name)
            elif before and not now:
                delete_copies(self.me, key(source), lambda n: n == name)


Handler = kubewasm.handler(ConfigReplicator)
