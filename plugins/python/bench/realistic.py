"""realistic in Python: plugins/testing/realistic's twin (see its
README.md): per Pod delta, label ``app``, two fields in one host call, the
Pod's Node from the cache, and one merge patch annotating the Pod with the
Node's zone. No JSON is parsed."""

import kubewasm
from kubewasm import (
    DeltaType, actions, cache, cache_only, fields_json, kinds, label, object_of, object_ref, preconditions,
    registration, subscription,
)

ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE_ANNOTATION = "kubewasm.io/zone"
POINTERS = ["/spec/nodeName", "/status/phase"]


class Realistic(kubewasm.Plugin):
    def registration(self):
        return registration(
            subscriptions=[
                subscription(kinds.Pod, deltas=[DeltaType.ADDED, DeltaType.UPDATED, DeltaType.RESYNC]),
                cache_only(kinds.Node),
            ],
            writes=[kinds.Pod],
        )

    def handle(self, delta):
        if delta.delta_type == DeltaType.SYNCED:
            return None
        pod = object_of(delta)
        # Read like a real handler would, used by none (as in the Rust plugin).
        label(pod, "app")
        node, _phase = (v if isinstance(v, str) else None for v in fields_json(pod, POINTERS))
        zone = None
        if node is not None:
            n = cache.get(kinds.Node, None, node)
            if n is not None:
                zone = label(n, ZONE_LABEL)
        actions.annotate(
            object_ref(kinds.Pod, delta),
            {ZONE_ANNOTATION: zone if zone is not None else "unknown"},
            preconditions(uid=delta.uid),
        )
        return None


Handler = kubewasm.handler(Realistic)
