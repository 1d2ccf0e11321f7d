"""A fake kubewasm host for unit tests of a plugin with pytest, natively:
no WebAssembly, no kubewasm binary, no cluster.

The SDK imports the bindings componentize-py generates (``wit_world``);
outside a component there are none. :func:`install` generates them from
the plugin's WIT (``componentize-py bindings``, a tenth of a second) and
points every import (cache reads, actions, label selectors, log, clock,
the methods of ``Object``) at the current :class:`FakeHost`. Install
before the plugin (and ``kubewasm``) is imported: a ``conftest.py`` does
it::

    # conftest.py
    import pathlib, sys
    root = pathlib.Path(__file__).parent
    sys.path[:0] = [str(root / "sdk"), str(root)]
    import kubewasm_fake
    kubewasm_fake.install(root / "wit")
    from kubewasm_fake import fake_host  # noqa: F401, E402 - the fixture

    # test_app.py
    import app
    def test_annotates(fake_host):
        handler = fake_host.load(app.Handler, "hello")
        delta = fake_host.added({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "greeting", "namespace": "demo"}})
        fake_host.handle(delta)
        assert fake_host.take_action_lines() == [
            'patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"hello"}}}'
            ' uid=uid-demo-greeting']

What it does as the host does: objects are snapshots; ``cache.list``
sorts by namespace then name and filters with a port of the host's
label-selector parser (checked against the same apimachinery golden
cases); ``to_json`` strips managedFields and the last-applied annotation;
field values are typed as the host types them. After :meth:`FakeHost.load`
the registration is enforced: reading a kind not subscribed to is
``not-subscribed``, writing one not declared ``not-declared``,
``cache.by_index`` answers declared indexes only. Actions must be well
formed (``invalid``), and :meth:`FakeHost.handle` drops the actions of a
call that fails. Not faked: the sidecar's access list, executing actions
(the cache changes only when the test changes it), retries, time passing.
"""

import atexit
import copy
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from kubewasm_fake_selector import Selector

__all__ = ["install", "FakeHost", "Action", "LogLine", "fake_host", "DEFAULT_NOW"]

#: The fake's clock starts here: 2026-01-01T00:00:00Z.
DEFAULT_NOW = 1_767_225_600

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_current: Optional["FakeHost"] = None
_installed: Optional[Path] = None
# The generated modules, once installed.
types: Any = None
handler: Any = None
raw_actions: Any = None
raw_cache: Any = None
raw_log: Any = None
Err: Any = None


def _componentize_py() -> str:
    env = os.environ.get("COMPONENTIZE_PY")
    if env:
        return env
    beside = Path(sys.executable).parent / "componentize-py"
    if beside.exists():
        return str(beside)
    found = shutil.which("componentize-py")
    if found:
        return found
    raise RuntimeError(
        "kubewasm fake host: componentize-py not found (it generates the WIT bindings the SDK imports): "
        "run the tests with the Python of the venv build.sh creates (.venv/bin/python -m pytest), "
        "or set COMPONENTIZE_PY")


def install(wit: Union[str, Path], world: str = "plugin") -> None:
    """Generates the bindings of ``world`` in the WIT folder ``wit`` into a
    temporary folder, puts them on ``sys.path`` and answers their imports
    from the current :class:`FakeHost`. Idempotent; call it before
    ``kubewasm`` or the plugin is imported."""
    global _installed, types, handler, raw_actions, raw_cache, raw_log, Err
    if _installed is not None:
        return
    out = Path(tempfile.mkdtemp(prefix="kubewasm-fake-"))
    atexit.register(shutil.rmtree, out, True)
    run = subprocess.run([_componentize_py(), "-d", str(wit), "-w", world, "bindings", str(out)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"kubewasm fake host: componentize-py bindings failed:\n{run.stderr}")
    sys.path.insert(0, str(out))
    import componentize_py_types
    from wit_world.exports import handler as h
    from wit_world.imports import actions, cache, clock, log, selectors
    from wit_world.imports import types as t
    types, handler, raw_actions, raw_cache, raw_log = t, h, actions, cache, log
    Err = componentize_py_types.Err

    class FakeObject(t.Object):
        """An object handle: a snapshot of one object the fake holds."""

        def __init__(self, obj: Dict[str, Any]) -> None:
            self._o = obj

        def kind(self) -> Any:
            return _gvk(self._o)

        def namespace(self) -> Optional[str]:
            return _meta(self._o).get("namespace") or None

        def name(self) -> str:
            return _meta(self._o).get("name", "")

        def uid(self) -> str:
            return _meta(self._o).get("uid", "")

        def resource_version(self) -> str:
            return _meta(self._o).get("resourceVersion", "")

        def generation(self) -> Optional[int]:
            g = _meta(self._o).get("generation")
            return g if isinstance(g, int) and not isinstance(g, bool) else None

        def label(self, key: str) -> Optional[str]:
            return dict(self.labels()).get(key)

        def labels(self) -> List[Tuple[str, str]]:
            return _pairs(self._o, "labels")

        def annotation(self, key: str) -> Optional[str]:
            return dict(self.annotations()).get(key)

        def annotations(self) -> List[Tuple[str, str]]:
            return _pairs(self._o, "annotations")

        def owner_references(self) -> List[Any]:
            return _owners(self._o)

        def controller(self) -> Optional[Any]:
            return next((r for r in _owners(self._o) if r.controller), None)

        def finalizers(self) -> List[str]:
            return [f for f in _meta(self._o).get("finalizers") or [] if isinstance(f, str)]

        def deletion_timestamp(self) -> Optional[str]:
            return _meta(self._o).get("deletionTimestamp")

        def meta(self) -> Any:
            m = _meta(self._o)
            return t.ObjectMeta(
                api_version=self._o.get("apiVersion", ""), kind=self._o.get("kind", ""),
                namespace=self.namespace(), name=self.name(), uid=self.uid(),
                resource_version=self.resource_version(), generation=self.generation(), labels=self.labels(),
                annotations=self.annotations(), owner_references=self.owner_references(),
                finalizers=self.finalizers(), creation_timestamp=m.get("creationTimestamp"),
                deletion_timestamp=m.get("deletionTimestamp"))

        def field(self, pointer: str) -> Optional[Any]:
            found = _pointer(self._o, pointer)
            return _field_value(found[0]) if found else None

        def fields(self, pointers: List[str]) -> List[Optional[Any]]:
            return [self.field(p) for p in pointers]

        def to_json(self) -> str:
            o = copy.deepcopy(self._o)
            m = o.get("metadata")
            if isinstance(m, dict):
                m.pop("managedFields", None)
                a = m.get("annotations")
                if isinstance(a, dict) and a.pop(_LAST_APPLIED, None) is not None and not a:
                    del m["annotations"]
            return _compact(o)

        def __exit__(self, *exc: Any) -> None:
            return None

        def __repr__(self) -> str:
            return f"Object({_key_text(self._o)})"

    class FakeLabelSelector(selectors.LabelSelector):
        """The host's label selector, parsed by the port of its parser."""

        def __init__(self, sel: Selector) -> None:
            self._sel = sel

        @classmethod
        def parse(cls, text: str) -> "FakeLabelSelector":
            try:
                return cls(Selector(text))
            except ValueError as e:
                raise Err(str(e)) from None

        def matches(self, labels: List[Tuple[str, str]]) -> bool:
            d = dict(labels)
            return self._sel.matches(d.get)

        def matches_object(self, obj: Any) -> bool:
            return self.matches(obj.labels())

        def to_string(self) -> str:
            return str(self._sel)

        def __exit__(self, *exc: Any) -> None:
            return None

    selectors.LabelSelector = FakeLabelSelector
    globals()["FakeObject"] = FakeObject
    cache.get = lambda kind, namespace, name: _host().cache_get(kind, namespace, name)
    cache.list = lambda kind, namespace, label_selector: _host().cache_list(kind, namespace, label_selector)
    cache.by_index = lambda index, value: _host().cache_by_index(index, value)
    actions.apply = lambda object_json, force, pre: _host().act_apply("apply", object_json, force, pre)
    actions.apply_status = lambda object_json, pre: _host().act_apply("apply-status", object_json, False, pre)
    actions.patch = lambda target, patch_type, patch, pre: _host().act_patch(target, patch_type, patch, pre)
    actions.delete = lambda target, propagation, pre: _host().act_delete(target, propagation, pre)
    actions.record_event = lambda event: _host().act_event(event)
    log.enabled = lambda level: level.value >= _host().log_level.value
    log.write = lambda level, message, fields: _host().log_write(level, message, fields)
    clock.now = lambda: clock.Instant(seconds=int(_host().now // 1), nanoseconds=_nanos(_host().now))
    clock.now_rfc3339 = lambda: _rfc3339(_host().now)
    _installed = out


def _host() -> "FakeHost":
    if _current is None:
        raise RuntimeError("kubewasm fake host: a host call with no FakeHost: create one first "
                           "(the fake_host fixture, or FakeHost())")
    return _current


def _nanos(now: float) -> int:
    return int(round((now - int(now // 1)) * 1e9)) % 1_000_000_000


def _rfc3339(now: float) -> str:
    return datetime.datetime.fromtimestamp(int(now // 1), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _compact(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _meta(o: Dict[str, Any]) -> Dict[str, Any]:
    m = o.get("metadata")
    return m if isinstance(m, dict) else {}


def _gvk(o: Dict[str, Any]) -> Any:
    av = o.get("apiVersion", "")
    group, _, version = av.rpartition("/")
    return types.GroupVersionKind(group=group, version=version, kind=o.get("kind", ""))


def _pairs(o: Dict[str, Any], which: str) -> List[Tuple[str, str]]:
    m = _meta(o).get(which)
    if not isinstance(m, dict):
        return []
    return sorted((k, v) for k, v in m.items() if isinstance(v, str))


def _owners(o: Dict[str, Any]) -> List[Any]:
    refs = _meta(o).get("ownerReferences") or []
    return [types.OwnerReference(
        api_version=r.get("apiVersion", ""), kind=r.get("kind", ""), name=r.get("name", ""), uid=r.get("uid", ""),
        controller=bool(r.get("controller")), block_owner_deletion=bool(r.get("blockOwnerDeletion")))
        for r in refs if isinstance(r, dict)]


def _key_text(o: Dict[str, Any]) -> str:
    ns, name = _meta(o).get("namespace"), _meta(o).get("name", "")
    return f"{ns}/{name}" if ns else name


def _field_value(v: Any) -> Any:
    if v is None:
        return types.FieldValue_Null()
    if isinstance(v, bool):
        return types.FieldValue_Boolean(v)
    if isinstance(v, int):
        if -(1 << 63) <= v < (1 << 63):
            return types.FieldValue_Integer(v)
        return types.FieldValue_Float(float(v))
    if isinstance(v, float):
        return types.FieldValue_Float(v)
    if isinstance(v, str):
        return types.FieldValue_Text(v)
    return types.FieldValue_Json(_compact(v))


def _pointer(o: Any, pointer: str, star: bool = False) -> List[Any]:
    if pointer == "":
        return [o]
    if not pointer.startswith("/"):
        return []
    at = [o]
    for seg in pointer[1:].split("/"):
        seg = seg.replace("~1", "/").replace("~0", "~")
        nxt: List[Any] = []
        for v in at:
            if isinstance(v, dict) and seg in v:
                nxt.append(v[seg])
            elif isinstance(v, list):
                if star and seg == "*":
                    nxt.extend(v)
                elif seg.isdigit() and str(int(seg)) == seg and int(seg) < len(v):
                    nxt.append(v[int(seg)])
        at = nxt
    return at


def _index_key(v: Any) -> Optional[str]:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, str)):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return None


def _plural(kind: str) -> str:
    low = kind.lower()
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return low[:-1] + "ies"
    if low.endswith(("s", "x", "ch", "sh")):
        return low + "es"
    return low + "s"


def _names(kind: Any, gvk: Any) -> bool:
    """Whether a kind-ref names objects of gvk (group and kind, any
    version); resource names resolve without discovery."""
    if isinstance(kind, types.KindRef_Gvk):
        return kind.value.group == gvk.group and kind.value.kind == gvk.kind
    res, _, group = kind.value.partition(".")
    if res not in (_plural(gvk.kind), gvk.kind.lower()):
        return False
    if group in ("", gvk.group) or (group == gvk.version and gvk.group == ""):
        return True
    version, _, rest = group.partition(".")
    return version == gvk.version and rest == gvk.group


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, types.KindRef_Gvk):
        return _names(b, a.value)
    if isinstance(b, types.KindRef_Gvk):
        return _names(a, b.value)
    return a.value == b.value


def _describe(kind: Any) -> str:
    if isinstance(kind, types.KindRef_Gvk):
        g = kind.value
        return f"{g.group}/{g.version}/{g.kind}" if g.group else f"{g.version}/{g.kind}"
    return kind.value


def _kind_name(kind: Any) -> str:
    return kind.value.kind if isinstance(kind, types.KindRef_Gvk) else kind.value


def _ref_key(ref: Any) -> str:
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name


def _decode(obj: Union[str, bytes, Dict[str, Any]]) -> Dict[str, Any]:
    o = json.loads(obj) if isinstance(obj, (str, bytes)) else copy.deepcopy(obj)
    if not isinstance(o, dict):
        raise ValueError(f"kubewasm fake host: an object must be a JSON object, got {obj!r}")
    return o


def _key(o: Dict[str, Any]) -> Tuple[str, str, str, str]:
    g = _gvk(o)
    name = _meta(o).get("name", "")
    if not g.kind or not g.version or not name:
        raise ValueError(f"kubewasm fake host: objects need apiVersion, kind and metadata.name, got {o!r}")
    return (g.group, g.kind, _meta(o).get("namespace") or "", name)


@dataclass
class Action:
    """One action a plugin emitted, as the host would queue it. ``verb`` is
    ``apply``, ``apply-status``, ``patch``, ``delete`` or ``event``; the
    other fields are those of that verb."""

    verb: str
    #: apply, apply-status: the object, decoded.
    object: Optional[Dict[str, Any]] = None
    force: bool = False
    #: patch, delete: the target (an actions.ObjectRef).
    target: Any = None
    #: patch: "merge" or "json", and the patch decoded.
    patch_type: Optional[str] = None
    patch: Any = None
    #: delete: "background", "foreground" or "orphan".
    propagation: Optional[str] = None
    #: event: the record (an actions.Event).
    event: Any = None
    #: (uid, resource_version), either None.
    preconditions: Tuple[Optional[str], Optional[str]] = (None, None)

    def __str__(self) -> str:
        """One line, the same in every language's fake: ``apply ConfigMap
        team-a/settings force``, ``patch ConfigMap demo/greeting merge {...}
        uid=U``, ``delete ConfigMap team-a/settings background uid=U``,
        ``event ConfigMap a/b Normal Reason: note uid=U``; preconditions
        last. An apply's object is left out (see ``object``)."""
        uid, rv = self.preconditions
        pre = (f" uid={uid}" if uid else "") + (f" rv={rv}" if rv else "")
        if self.verb in ("apply", "apply-status"):
            o = self.object or {}
            return f"{self.verb} {o.get('kind')} {_key_text(o)}" + (" force" if self.force else "") + pre
        if self.verb == "patch":
            return (f"patch {_kind_name(self.target.kind)} {_ref_key(self.target)} {self.patch_type} "
                    f"{_compact(self.patch)}{pre}")
        if self.verb == "delete":
            return f"delete {_kind_name(self.target.kind)} {_ref_key(self.target)} {self.propagation}{pre}"
        e = self.event
        t = "Warning" if e.event_type.name == "WARNING" else "Normal"
        line = f"event {_kind_name(e.regarding.kind)} {_ref_key(e.regarding)} {t} {e.reason}: {e.note}"
        return line + (f" uid={e.regarding_uid}" if e.regarding_uid else "")


@dataclass
class LogLine:
    """One record a plugin logged."""

    level: str
    message: str
    fields: List[Tuple[str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        """``info copy deleted copy=team-a/settings source=default/settings``."""
        return " ".join([self.level, self.message] + [f"{k}={v}" for k, v in self.fields])


class FakeHost:
    """The current fake host: creating one makes it current (the
    ``fake_host`` fixture does, and resets it after the test). Starts empty:
    no objects, no registration (nothing enforced until :meth:`load`),
    every log level enabled, the clock at :data:`DEFAULT_NOW`."""

    def __init__(self) -> None:
        global _current
        if _installed is None:
            raise RuntimeError("kubewasm fake host: call kubewasm_fake.install(WIT_DIR) first (in conftest.py)")
        self.cache: Dict[Tuple[str, str, str, str], Dict[str, Any]] = {}
        self.actions: List[Action] = []
        self.logs: List[LogLine] = []
        self.now: float = float(DEFAULT_NOW)
        self.log_level: Any = raw_log.Level.TRACE
        self.registration: Any = None
        _current = self

    # ---- the plugin ----

    def load(self, handler_class: Any, name: str = "plugin", config: str = "{}") -> Any:
        """Instantiates the ``Handler`` export class (``kubewasm.handler(P)``)
        and registers it as the host does, with a context named ``name``
        (version ``000000000000``) and ``config`` (JSON); the fake keeps
        and enforces the registration. Returns the handler. A refused
        registration raises ValueError with the plugin's message."""
        h = handler_class()
        try:
            self.registration = h.register(handler.Context(name=name, version="000000000000", config=config))
        except Err as e:
            raise ValueError(e.value) from None
        self._handler = h
        return h

    def handle(self, delta: Any) -> Any:
        """Hands ``delta`` to the loaded handler: returns the WIT ``Handled``
        (``handled.value`` is the requeue delay in ms for
        ``Handled_RequeueAfter``); a failure raises ``kubewasm.Retry`` or
        ``kubewasm.Permanent`` with the handler's message, and the actions
        the call emitted are dropped, as the host drops them."""
        import kubewasm
        mark = len(self.actions)
        try:
            return self._handler.handle(delta)
        except Err as e:
            del self.actions[mark:]
            if isinstance(e.value, handler.HandlerError_Retry):
                raise kubewasm.Retry(e.value.value) from None
            raise kubewasm.Permanent(e.value.value) from None

    # ---- the cache ----

    def put(self, obj: Union[str, bytes, Dict[str, Any]]) -> "FakeHost":
        """Puts an object (a dict or JSON text with apiVersion, kind,
        metadata.name and, if namespaced, metadata.namespace) into the cache,
        replacing one of the same kind, namespace and name, and fills in
        what the API server would: ``metadata.uid`` (``uid-NAMESPACE-NAME``,
        or the replaced object's), ``resourceVersion`` (the replaced
        object's plus one, or ``1``), ``creationTimestamp`` (the clock)."""
        self._store(obj)
        return self

    def _store(self, obj: Union[str, bytes, Dict[str, Any]]) -> Dict[str, Any]:
        o = _decode(obj)
        k = _key(o)
        before = _meta(self.cache.get(k, {}))
        m = o.setdefault("metadata", {})
        if "uid" not in m:
            m["uid"] = before.get("uid") or ("uid-" + (f"{k[2]}-" if k[2] else "") + k[3])
        if "resourceVersion" not in m:
            rv = before.get("resourceVersion", "")
            m["resourceVersion"] = str(int(rv) + 1) if rv.isdigit() else "1"
        if "creationTimestamp" not in m:
            m["creationTimestamp"] = before.get("creationTimestamp") or _rfc3339(self.now)
        self.cache[k] = o
        return o

    def remove(self, obj: Union[str, bytes, Dict[str, Any]]) -> bool:
        """Removes the object (by kind, namespace and name); whether it was there."""
        return self.cache.pop(_key(_decode(obj)), None) is not None

    def objects(self) -> List[Dict[str, Any]]:
        """Every cached object, by namespace and name."""
        return [self.cache[k] for k in sorted(self.cache, key=lambda k: (k[2], k[3], k[0], k[1]))]

    # ---- deltas ----

    def _delta(self, delta_type: Any, o: Dict[str, Any], old: Optional[Dict[str, Any]] = None) -> Any:
        gvk, m = _gvk(o), _meta(o)
        labels = dict(_pairs(o, "labels"))
        sub = 0
        if self.registration is not None:
            first, fit = None, None
            for i, s in enumerate(self.registration.subscriptions):
                if not _names(s.kind, gvk):
                    continue
                first = i if first is None else first
                if s.namespace is not None and s.namespace != m.get("namespace"):
                    continue
                if s.label_selector is not None:
                    try:
                        if not Selector(s.label_selector).matches(labels.get):
                            continue
                    except ValueError:
                        continue
                if delta_type == types.DeltaType.REQUEUE or delta_type in s.deltas:
                    fit = i
                    break
            sub = fit if fit is not None else (first or 0)
        return types.Delta(
            delta_type=delta_type, subscription=sub, namespace=m.get("namespace") or None, name=m.get("name", ""),
            uid=m.get("uid", ""), resource_version=m.get("resourceVersion", ""), object=FakeObject(o),  # noqa: F821
            old_object=FakeObject(old) if old is not None else None, initial=False,  # noqa: F821
            final_state_unknown=False, attempt=1, last_failure=None)

    def added(self, obj: Union[str, bytes, Dict[str, Any]]) -> Any:
        """Puts ``obj`` and returns its ``added`` delta (for the first
        subscription of its kind whose namespace, selector and delta types
        fit, else the first of its kind, else 0). The delta is a dataclass:
        set ``initial``, ``attempt``, ``last_failure`` or ``subscription``
        as a test needs."""
        return self._delta(types.DeltaType.ADDED, self._store(obj))

    def updated(self, obj: Union[str, bytes, Dict[str, Any]]) -> Any:
        """Replaces the cached object and returns the ``updated`` delta with
        the cached one as its old state (KeyError when not cached)."""
        o = _decode(obj)
        k = _key(o)
        if k not in self.cache:
            raise KeyError(f"kubewasm fake host: updated: {k} is not in the cache: put it first")
        old = self.cache[k]
        return self._delta(types.DeltaType.UPDATED, self._store(o), old)

    def deleted(self, obj: Union[str, bytes, Dict[str, Any]]) -> Any:
        """Removes the object from the cache and returns its ``deleted``
        delta, carrying the cached state (or ``obj`` when not cached)."""
        o = _decode(obj)
        return self._delta(types.DeltaType.DELETED, self.cache.pop(_key(o), o))

    def resync(self, obj: Union[str, bytes, Dict[str, Any]]) -> Any:
        """Puts ``obj`` and returns its ``resync`` delta."""
        return self._delta(types.DeltaType.RESYNC, self._store(obj))

    def requeue(self, obj: Union[str, bytes, Dict[str, Any]]) -> Any:
        """Puts ``obj`` and returns its ``requeue`` delta."""
        return self._delta(types.DeltaType.REQUEUE, self._store(obj))

    def synced(self, subscription: int = 0) -> Any:
        """The ``synced`` delta of a subscription: no object."""
        return types.Delta(delta_type=types.DeltaType.SYNCED, subscription=subscription, namespace=None, name="",
                           uid="", resource_version="", object=None, old_object=None, initial=False,
                           final_state_unknown=False, attempt=1, last_failure=None)

    # ---- what the plugin did ----

    def take_actions(self) -> List[Action]:
        """The actions accepted so far, in order; clears them."""
        out, self.actions = self.actions, []
        return out

    def take_action_lines(self) -> List[str]:
        """:meth:`take_actions`, one line each (:meth:`Action.__str__`)."""
        return [str(a) for a in self.take_actions()]

    def take_logs(self) -> List[LogLine]:
        """The records logged so far; clears them."""
        out, self.logs = self.logs, []
        return out

    def set_log_level(self, level: str) -> None:
        """Records below ``level`` (``trace``... ``error``) are neither enabled
        nor kept (default: every level)."""
        self.log_level = raw_log.Level[level.upper()]

    # ---- the clock ----

    def set_clock(self, seconds: float) -> None:
        """Sets the clock to ``seconds`` since the Unix epoch."""
        self.now = float(seconds)

    def set_time(self, rfc3339: str) -> None:
        """Sets the clock to an RFC 3339 UTC time (``2026-11-22T17:00:00Z``)."""
        t = datetime.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        self.now = t.timestamp()

    def advance(self, seconds: Union[float, datetime.timedelta]) -> None:
        """Moves the clock forward (as a test waits out a requeue)."""
        self.now += seconds.total_seconds() if isinstance(seconds, datetime.timedelta) else float(seconds)

    # ---- the imports ----

    def _check_read(self, kind: Any) -> None:
        reg = self.registration
        if reg is not None and not any(_same_kind(s.kind, kind) for s in reg.subscriptions):
            raise Err(raw_cache.CacheError_NotSubscribed(
                f"{_describe(kind)} is not among the plugin's subscriptions "
                "(subscribe to it, with no delta types to only read it)"))

    def _sorted(self) -> List[Dict[str, Any]]:
        return [self.cache[k] for k in sorted(self.cache, key=lambda k: (k[2], k[3], k[0], k[1]))]

    def cache_get(self, kind: Any, namespace: Optional[str], name: str) -> Optional[Any]:
        self._check_read(kind)
        for o in self._sorted():
            if (_meta(o).get("namespace") or None) == namespace and _meta(o).get("name") == name \
                    and _names(kind, _gvk(o)):
                return FakeObject(o)  # noqa: F821
        return None

    def cache_list(self, kind: Any, namespace: Optional[str], label_selector: Optional[str]) -> List[Any]:
        self._check_read(kind)
        try:
            sel = Selector(label_selector or "")
        except ValueError as e:
            raise Err(raw_cache.CacheError_InvalidSelector(str(e))) from None
        return [FakeObject(o) for o in self._sorted()  # noqa: F821
                if (namespace is None or _meta(o).get("namespace", "") == namespace) and _names(kind, _gvk(o))
                and sel.matches(dict(_pairs(o, "labels")).get)]

    def cache_by_index(self, index: str, value: str) -> List[Any]:
        idx = next((i for i in (self.registration.indexes if self.registration else []) if i.name == index), None)
        if idx is None:
            raise Err(raw_cache.CacheError_UnknownIndex(
                f"no index {index!r} was declared at registration (FakeHost.load registers the plugin)"))
        return [FakeObject(o) for o in self._sorted()  # noqa: F821
                if _names(idx.kind, _gvk(o)) and any(_index_key(v) == value for v in _pointer(o, idx.pointer, True))]

    def _check_write(self, kind: Any) -> None:
        reg = self.registration
        if reg is not None and not any(_same_kind(w, kind) for w in reg.writes):
            raise Err(raw_actions.ActionError_NotDeclared(f"{_describe(kind)} is not among the registration's writes"))

    @staticmethod
    def _pre(pre: Any) -> Tuple[Optional[str], Optional[str]]:
        return (pre.uid, pre.resource_version)

    def act_apply(self, verb: str, object_json: str, force: bool, pre: Any) -> None:
        try:
            o = json.loads(object_json)
        except ValueError as e:
            raise Err(raw_actions.ActionError_Invalid(f"the object is not JSON: {e}")) from None
        g = _gvk(o) if isinstance(o, dict) else None
        if g is None or not g.version or not g.kind or not _meta(o).get("name"):
            raise Err(raw_actions.ActionError_Invalid("an applied object needs apiVersion, kind and metadata.name"))
        self._check_write(types.KindRef_Gvk(g))
        self.actions.append(Action(verb, object=o, force=force, preconditions=self._pre(pre)))

    def act_patch(self, target: Any, patch_type: Any, patch: str, pre: Any) -> None:
        try:
            p = json.loads(patch)
        except ValueError as e:
            raise Err(raw_actions.ActionError_Invalid(f"the patch is not JSON: {e}")) from None
        t = "merge" if patch_type == raw_actions.PatchType.MERGE else "json"
        if t == "merge" and not isinstance(p, dict):
            raise Err(raw_actions.ActionError_Invalid("a merge patch must be a JSON object"))
        if t == "json" and not isinstance(p, list):
            raise Err(raw_actions.ActionError_Invalid("a JSON patch must be an array of operations"))
        self._check_write(target.kind)
        self.actions.append(Action("patch", target=target, patch_type=t, patch=p, preconditions=self._pre(pre)))

    def act_delete(self, target: Any, propagation: Any, pre: Any) -> None:
        self._check_write(target.kind)
        self.actions.append(Action("delete", target=target, propagation=propagation.name.lower(),
                                   preconditions=self._pre(pre)))

    def act_event(self, event: Any) -> None:
        if not event.reason:
            raise Err(raw_actions.ActionError_Invalid("an Event needs a reason"))
        self.actions.append(Action("event", target=event.regarding, event=event))

    def log_write(self, level: Any, message: str, fields: List[Tuple[str, str]]) -> None:
        if level.value >= self.log_level.value:
            self.logs.append(LogLine(level.name.lower(), message, list(fields)))


try:
    import pytest

    @pytest.fixture
    def fake_host() -> Any:
        """A fresh :class:`FakeHost`, current for one test."""
        global _current
        host = FakeHost()
        yield host
        _current = None
except ImportError:  # pragma: no cover - pytest is only needed to run tests
    pass
