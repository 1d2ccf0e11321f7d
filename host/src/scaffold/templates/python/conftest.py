"""pytest setup: the kubewasm SDK's fake host (sdk/kubewasm_fake.py) stands
in for the host, with the WIT bindings generated from wit/ by
componentize-py (from .venv, which build.sh creates)."""

import pathlib
import sys

root = pathlib.Path(__file__).parent
sys.path[:0] = [str(root / "sdk"), str(root)]

import kubewasm_fake  # noqa: E402

kubewasm_fake.install(root / "wit")

from kubewasm_fake import fake_host  # noqa: E402, F401 - the fixture
