"""noop in Python: plugins/testing/noop's twin (the floor of the per-delta
overhead): subscribes to every Pod delta and does nothing."""

import kubewasm
from kubewasm import SUBSCRIBABLE_DELTAS, kinds, registration, subscription


class Noop(kubewasm.Plugin):
    def registration(self):
        return registration(subscriptions=[subscription(kinds.Pod, deltas=SUBSCRIBABLE_DELTAS)])

    def handle(self, delta):
        return None


Handler = kubewasm.handler(Noop)
