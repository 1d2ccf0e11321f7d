"""parse-all in Python: plugins/testing/parse-all's twin (see its README.md
and plugins/bench-logic): per Pod delta, the whole object from
``to_json()`` parsed with ``json.loads``, the same decision as
``bench_logic::evaluate`` and its merge patch, when there is one, as the
only action. Config ``{"repeat": N}`` (default 1) runs the decision N
times."""

import json
from typing import Optional

import kubewasm
from kubewasm import (
    DeltaType, Permanent, actions, cache_only, kinds, object_of, object_ref, parse_config, preconditions,
    registration, subscription,
)

ANNOTATION = "kubewasm.io/health"


def has_memory_limit(c: dict) -> bool:
    return "memory" in ((c.get("resources") or {}).get("limits") or {})


def evaluate(text: str) -> Optional[str]:
    """bench_logic::evaluate: the merge patch (text) reporting restarts,
    containers without a memory limit and a phase other than Running or
    Succeeded, or None when there is nothing to report."""
    try:
        pod = json.loads(text)
    except ValueError as e:
        raise Permanent(f"not a Pod: {e}") from None
    if not isinstance(pod, dict):
        raise Permanent("not a Pod: not an object")
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    restarts = sum(
        c["restartCount"]
        for c in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    )
    unlimited = [
        c["name"]
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if not has_memory_limit(c)
    ]
    phase = status.get("phase")
    if phase is None:
        phase = "Unknown"
    if restarts == 0 and not unlimited and phase in ("Running", "Succeeded"):
        return None
    node = spec.get("nodeName")
    if node is None:
        node = "-"
    summary = f"phase={phase} node={node} restarts={restarts} unlimited={','.join(unlimited) or '-'}"
    return json.dumps({"metadata": {"annotations": {ANNOTATION: summary}}}, separators=(",", ":"))


class ParseAll(kubewasm.Plugin):
    def __init__(self, ctx):
        super().__init__(ctx)
        repeat = parse_config(ctx, {"repeat": 1})["repeat"]
        if repeat < 0:
            raise ValueError(f"invalid config: repeat must be a count, not {repeat}")
        self.repeat = repeat

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
        text = object_of(delta).to_json()
        decided = None
        for _ in range(self.repeat):
            decided = evaluate(text)
        if decided is not None:
            actions.patch(object_ref(kinds.Pod, delta), "merge", decided, preconditions(uid=delta.uid))
        return None


Handler = kubewasm.handler(ParseAll)
