"""{{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas
and annotates each ConfigMap with `kubewasm.io/hello: {{name}}`."""

import kubewasm
from kubewasm import actions, kinds, log, object_of, registration, subscription


class Hello(kubewasm.Plugin):
    # __init__(self, ctx) (kubewasm.Plugin's) keeps the context as
    # self.context: ctx.name, ctx.version and ctx.config (decode it with
    # kubewasm.parse_config(ctx, defaults)).

    def registration(self):
        return registration(
            subscriptions=[subscription(kinds.ConfigMap, deltas=["added"])],
            writes=[kinds.ConfigMap],
        )

    def handle(self, delta):
        obj = object_of(delta)
        log.info("hello", name=delta.name)
        # One merge patch of the annotation, guarded by the ConfigMap's uid.
        actions.annotate_object(obj, {"kubewasm.io/hello": "{{name}}"})
        return kubewasm.DONE


Handler = kubewasm.handler(Hello)
