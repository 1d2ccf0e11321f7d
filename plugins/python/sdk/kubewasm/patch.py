"""RFC 6902 JSON patches and RFC 6901 JSON pointers (pure Python: no host
call). A port of the Rust SDK's ``patch.rs``::

    from kubewasm.patch import JsonPatch, pointer
    p = (JsonPatch()
         .test("/metadata/resourceVersion", "42")
         .add(pointer(["metadata", "annotations", "example.com/owner"]), "me")
         .remove("/metadata/labels/stale"))
    str(p)  # '[{"op":"test","path":"/metadata/resourceVersion","value":"42"},...]'

Send a patch with ``kubewasm.actions.patch_json(target, p)``.
"""

import json
from typing import Any, Iterable, List, Optional

__all__ = ["escape", "pointer", "JsonPatch", "to_json"]


def to_json(value: Any) -> str:
    """Compact JSON text with sorted keys and UTF-8 kept as is: what the
    SDK sends to the host (the same text serde_json writes)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def escape(segment: str) -> str:
    """Escapes one reference token of a JSON pointer: ``~`` becomes ``~0``,
    ``/`` becomes ``~1`` (``example.com/zone`` -> ``example.com~1zone``)."""
    return segment.replace("~", "~0").replace("/", "~1")


def pointer(segments: Iterable[str]) -> str:
    """A JSON pointer from unescaped segments:
    ``pointer(["metadata", "labels", "app.kubernetes.io/name"])`` is
    ``/metadata/labels/app.kubernetes.io~1name``; no segments is ``""``
    (the whole document)."""
    return "".join("/" + escape(str(s)) for s in segments)


class JsonPatch:
    """An RFC 6902 JSON patch: operations applied in order, all or nothing.
    Paths are JSON pointers, already escaped (build them with
    :func:`pointer` when a segment may hold ``/`` or ``~``); ``-`` as the
    last segment of an ``add`` appends to an array. Every builder method
    returns the patch itself, so calls chain. ``str(patch)`` is the compact
    JSON text that is sent."""

    def __init__(self, ops: Optional[Iterable[dict]] = None) -> None:
        """No operations (or a copy of ``ops``, dicts with ``op``, ``path``
        and, but for ``remove``, ``value``)."""
        self._ops: List[dict] = [dict(op) for op in ops] if ops is not None else []

    def _op(self, op: str, path: str, value: Any = None, with_value: bool = True) -> "JsonPatch":
        if not isinstance(path, str):
            raise TypeError(f"JSON patch path must be a str, not {type(path).__name__}: {path!r}")
        entry = {"op": op, "path": path}
        if with_value:
            entry["value"] = value
        self._ops.append(entry)
        return self

    def add(self, path: str, value: Any) -> "JsonPatch":
        """``add``: sets ``path`` (creating an object member, or inserting
        into an array at that index, ``-`` appending)."""
        return self._op("add", path, value)

    def remove(self, path: str) -> "JsonPatch":
        """``remove``: deletes ``path``, which must exist."""
        return self._op("remove", path, with_value=False)

    def replace(self, path: str, value: Any) -> "JsonPatch":
        """``replace``: sets ``path``, which must exist."""
        return self._op("replace", path, value)

    def test(self, path: str, value: Any) -> "JsonPatch":
        """``test``: the whole patch fails unless ``path`` equals ``value``
        (the server answers 422, not a conflict: guard against concurrent
        writes with a resourceVersion precondition instead)."""
        return self._op("test", path, value)

    def is_empty(self) -> bool:
        """Whether there are no operations."""
        return not self._ops

    def __len__(self) -> int:
        """How many operations."""
        return len(self._ops)

    def ops(self) -> List[dict]:
        """The operations, as dicts (``{"op", "path", "value"?}``; a copy)."""
        return [dict(op) for op in self._ops]

    def to_value(self) -> List[dict]:
        """The patch as a JSON-ready list (same as :meth:`ops`)."""
        return self.ops()

    def __str__(self) -> str:
        """The compact JSON text (what is sent)."""
        return to_json(self._ops)

    def __repr__(self) -> str:
        return f"JsonPatch({self._ops!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonPatch) and self._ops == other._ops
