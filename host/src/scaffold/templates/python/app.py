"""{{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas
and annotates each ConfigMap with `kubewasm.io/hello: {{name}}`."""

import kubewasm
from kubewasm import DeltaType, actions, kinds, log, object_ref, parts, registration, subscription


class Hello(kubewasm.Plugin):
    def registration(self):
        return registration(
            subscriptions=[subscription(kinds.ConfigMap, deltas=[DeltaType.ADDED])],
            writes=[kinds.ConfigMap],
        )

    def handle(self, delta):
        meta, _ = parts(delta)
        log.info("hello", name=meta.name)
        actions.patch_merge(object_ref(kinds.ConfigMap, meta),
                            {"metadata": {"annotations": {"kubewasm.io/hello": "{{name}}"}}})


Handler = kubewasm.handler(Hello)
