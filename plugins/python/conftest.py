"""pytest setup for the SDK's and the example's unit tests: the SDK's fake
host (sdk/kubewasm_fake.py) stands in for the host, with bindings generated
from wit/v0.2.0. Run from here: `.venv/bin/python -m pytest -q`."""

import pathlib
import sys

here = pathlib.Path(__file__).parent
sys.path[:0] = [str(here / "sdk"), str(here / "config-replicator")]

import kubewasm_fake  # noqa: E402

kubewasm_fake.install(here.parent.parent / "wit" / "v0.2.0")

from kubewasm_fake import fake_host  # noqa: E402, F401 - the fixture
