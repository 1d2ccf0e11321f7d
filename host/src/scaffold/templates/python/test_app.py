"""A unit test of the hello plugin through the SDK's fake host
(`.venv/bin/python -m pytest`): no WebAssembly, no host. The ``fake_host``
fixture stands in for the host: put objects into its cache, load the
plugin, hand it deltas, then check the actions it emitted
(``take_action_lines``, ``take_actions``) and what it logged
(``take_logs``)."""

import app


def test_annotates_each_config_map(fake_host):
    fake_host.load(app.Handler, "{{name}}")
    fake_host.handle(fake_host.added(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "greeting", "namespace": "demo"}}))
    assert fake_host.take_action_lines() == [
        'patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"{{name}}"}}}'
        " uid=uid-demo-greeting",
    ]
    assert [str(line) for line in fake_host.take_logs()] == ["info hello name=greeting"]
