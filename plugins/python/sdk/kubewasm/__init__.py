"""kubewasm SDK for Python plugins (componentize-py), WIT ``kubewasm:plugin@0.2.0``.

What every Python guest would otherwise write by hand around the raw
bindings componentize-py generates (``wit_world``): the ``Handler`` export
(``handler(PluginClass)``), kinds, registration builders, config parsing,
lazy object readers, label selectors (parsed and matched by the host),
cache reads and actions that turn refusals into permanent handler errors,
preconditions, Events, JSON patches, owner references, finalizers, logging
and the clock::

    import kubewasm
    from kubewasm import actions, kinds, registration, subscription

    class Hello(kubewasm.Plugin):
        def registration(self):
            return registration(subscriptions=[subscription(kinds.ConfigMap, deltas=["added"])],
                                writes=[kinds.ConfigMap])

        def handle(self, delta):
            obj = kubewasm.object_of(delta)
            actions.annotate_object(obj, {"example.com/seen": "yes"})
            # return None (done), kubewasm.DONE or kubewasm.requeue_after(30)

    Handler = kubewasm.handler(Hello)

Enums (delta types, patch type, propagation, event type, log level) are
accepted as their members (``kubewasm.DeltaType.ADDED``) or as their WIT
names in any case (``"added"``, ``"merge"``, ``"Warning"``); any other value
raises :class:`InvalidArgument` naming it and the accepted names, which
refuses the registration or fails the delta permanently with that message
(instead of a trap in the bindings).

Errors: raise :class:`Retry` (retried with backoff) or :class:`Permanent`
(dead letter) from ``handle``; any other exception is permanent too, its
message kept (``ValueError``) or prefixed with its type and where it was
raised (every other exception: a bug).
"""

import json
import traceback
from datetime import timedelta
from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import handler as wit_handler
from wit_world.imports import actions as raw_actions
from wit_world.imports import cache as raw_cache
from wit_world.imports import clock as raw_clock
from wit_world.imports import log as raw_log
from wit_world.imports import selectors as raw_selectors
from wit_world.imports import types

from .patch import JsonPatch, escape, pointer, to_json

__all__ = [
    # the plugin and its export
    "Plugin", "handler", "context", "field_manager", "Context", "Registration", "Subscription", "Index",
    # outcomes and errors
    "DONE", "requeue_after", "requeue_after_ms", "Handled", "Permanent", "Retry", "InvalidArgument",
    # enums
    "DeltaType", "PatchType", "Propagation", "EventType", "Level", "delta_type", "patch_type",
    "propagation", "event_type", "log_level", "wit_name", "OBJECT_DELTAS", "SUBSCRIBABLE_DELTAS",
    "ALL_DELTAS",
    # kinds
    "GroupVersionKind", "KindRef", "gvk", "resource", "kind_ref", "kinds", "EVENT", "api_version",
    "gvk_from_api_version", "kind_of", "is_kind",
    # registration
    "subscription", "cache_only", "index", "registration", "parse_config",
    # deltas and objects
    "Delta", "Object", "ObjectMeta", "OwnerReference", "FieldValue", "Failure", "object_of", "parts",
    "old_meta", "delta_is", "retried", "failure_kind", "failure_message", "is_conflict", "key", "label",
    "annotation", "is_terminating", "has_finalizer", "field_value_json", "field_json", "fields_json",
    "field_str", "field_int", "field_bool",
    # references and preconditions
    "ObjectRef", "Preconditions", "EventRecord", "object_ref", "object_ref_of", "owner_object_ref",
    "preconditions", "preconditions_of",
    # selectors
    "Selector", "LabelSelector", "parse_selector",
    # owners
    "find_owner", "controller_owner", "controller_ref", "controller_of", "owner_reference_json",
    "set_owner_reference", "set_controller_reference",
    # patches, finalizers, events
    "JsonPatch", "escape", "pointer", "to_json", "annotations_patch", "add_finalizer_patch",
    "remove_finalizer_patch", "event_record",
    # host calls
    "cache", "actions", "log", "clock",
]

# ---- raw types, re-exported -------------------------------------------------

Context = wit_handler.Context
Registration = wit_handler.Registration
Subscription = wit_handler.Subscription
Index = wit_handler.Index
Handled = wit_handler.Handled
Delta = types.Delta
Object = types.Object
ObjectMeta = types.ObjectMeta
OwnerReference = types.OwnerReference
GroupVersionKind = types.GroupVersionKind
KindRef = types.KindRef
FieldValue = types.FieldValue
Failure = types.Failure
ObjectRef = raw_actions.ObjectRef
Preconditions = raw_actions.Preconditions
#: The record ``actions.record_event`` takes (WIT ``event``).
EventRecord = raw_actions.Event
#: The host's label selector resource (``parse``, ``matches``,
#: ``matches_object``, ``to_string``); :class:`Selector` wraps it.
LabelSelector = raw_selectors.LabelSelector

DeltaType = types.DeltaType
PatchType = raw_actions.PatchType
Propagation = raw_actions.Propagation
EventType = raw_actions.EventType
Level = raw_log.Level


# ---- errors -------------------------------------------------------------------

class Permanent(Exception):
    """A failure retrying will not fix: raise it from ``handle`` (the delta
    goes to dead letters with this message)."""


class Retry(Exception):
    """A transient failure: raise it from ``handle``; the host retries the
    delta with backoff and the next attempt's ``delta.attempt`` and
    ``delta.last_failure`` say so."""


class InvalidArgument(ValueError):
    """A value an SDK function cannot take (an unknown enum name, a value
    of the wrong type): raised before anything reaches the host. Its
    message names the value and what is accepted."""


def _show(value: Any) -> str:
    """A value as an error message shows it: strings quoted, others with
    their type."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return f"{value!r} ({type(value).__name__})"


def _message(e: BaseException) -> str:
    """The text a failure is reported with: the message of Permanent,
    Retry and ValueError (meant to be read); for any other exception (a
    bug) its type, message and where it was raised."""
    text = str(e.args[0]) if len(e.args) == 1 else str(e)
    if isinstance(e, (Permanent, Retry, ValueError)):
        return text
    where = ""
    frames = traceback.extract_tb(e.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return f"{type(e).__name__}: {text}{where}" if text else f"{type(e).__name__}{where}"


def _check_str(what: str, value: Any, optional: bool = False) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str{' or None' if optional else ''}, not {_show(value)}")
    return value


def _check_int(what: str, value: Any, low: int, high: int, optional: bool = False) -> Optional[int]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{what} must be an int from {low} to {high}, not {_show(value)}")
    return value


def _check_strs(what: str, values: Any) -> List[str]:
    if isinstance(values, str) or not isinstance(values, _Iterable):
        raise InvalidArgument(f"{what} must be a list of str, not {_show(values)}")
    return [_check_str(f"{what}[{i}]", v) for i, v in enumerate(values)]


# ---- enums --------------------------------------------------------------------

def wit_name(member: Any) -> str:
    """The WIT name of an enum member: ``DeltaType.ADDED`` is ``added``."""
    return member.name.lower().replace("_", "-")


def _enum(enum_cls: Any, what: str, value: Any) -> Any:
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        wanted = value.lower()
        for member in enum_cls:
            if wit_name(member) == wanted:
                return member
    accepted = ", ".join(f'"{wit_name(m)}"' for m in enum_cls)
    raise InvalidArgument(f"invalid {what} {_show(value)}: expected one of {accepted} "
                          f"(or a kubewasm.{enum_cls.__name__})")


def delta_type(value: Union[DeltaType, str]) -> DeltaType:
    """A :class:`DeltaType` from a member or its name (``"added"``,
    ``"updated"``, ``"deleted"``, ``"resync"``, ``"synced"``,
    ``"requeue"``; any case); :class:`InvalidArgument` otherwise."""
    return _enum(DeltaType, "delta type", value)


def patch_type(value: Union[PatchType, str]) -> PatchType:
    """A :class:`PatchType` from a member or ``"merge"`` / ``"json"``."""
    return _enum(PatchType, "patch type", value)


def propagation(value: Union[Propagation, str]) -> Propagation:
    """A :class:`Propagation` from a member or ``"background"``,
    ``"foreground"``, ``"orphan"``."""
    return _enum(Propagation, "propagation", value)


def event_type(value: Union[EventType, str]) -> EventType:
    """An :class:`EventType` from a member or ``"Normal"`` / ``"Warning"``
    (any case)."""
    return _enum(EventType, "event type", value)


def log_level(value: Union[Level, str]) -> Level:
    """A log :class:`Level` from a member or ``"trace"``, ``"debug"``,
    ``"info"``, ``"warn"``, ``"error"``."""
    return _enum(Level, "log level", value)


# Private names for bodies whose parameters shadow the public functions.
_delta_type, _patch_type, _propagation, _event_type, _log_level = (
    delta_type, patch_type, propagation, event_type, log_level)

#: What :func:`subscription` delivers by default: added, updated, deleted, resync.
OBJECT_DELTAS: Tuple[DeltaType, ...] = (DeltaType.ADDED, DeltaType.UPDATED, DeltaType.DELETED,
                                        DeltaType.RESYNC)
#: Every delta type a subscription lists (all but ``requeue``, which comes
#: whenever ``handle`` asks for it, whatever the subscription says).
SUBSCRIBABLE_DELTAS: Tuple[DeltaType, ...] = OBJECT_DELTAS + (DeltaType.SYNCED,)
#: Every delta type.
ALL_DELTAS: Tuple[DeltaType, ...] = SUBSCRIBABLE_DELTAS + (DeltaType.REQUEUE,)


# ---- outcomes -----------------------------------------------------------------

#: ``handle`` is done with the delta (returning ``None`` means the same).
DONE: Handled = wit_handler.Handled_Done()

_U64 = 2**64 - 1


def requeue_after(after: Union[int, float, timedelta]) -> Handled:
    """What ``handle`` returns to see the object again, as a ``requeue``
    delta, after ``after`` seconds (a number or a ``timedelta``; rounded
    down to whole milliseconds), unless a newer delta of it comes first:
    ``return kubewasm.requeue_after(30)``."""
    if isinstance(after, timedelta):
        seconds = after.total_seconds()
    elif isinstance(after, (int, float)) and not isinstance(after, bool):
        seconds = after
    else:
        raise InvalidArgument(f"requeue_after takes seconds (int, float or timedelta), not {_show(after)}")
    if not seconds >= 0:
        raise InvalidArgument(f"requeue_after takes a delay of 0 or more seconds, not {_show(after)}")
    return wit_handler.Handled_RequeueAfter(min(int(seconds * 1000), _U64))


def requeue_after_ms(ms: int) -> Handled:
    """:func:`requeue_after` in whole milliseconds."""
    return wit_handler.Handled_RequeueAfter(_check_int("requeue_after_ms", ms, 0, _U64))


def _handled(result: Any) -> Handled:
    if result is None:
        return DONE
    if isinstance(result, wit_handler.Handled_Done):
        return result
    if isinstance(result, wit_handler.Handled_RequeueAfter):
        _check_int("requeue-after milliseconds", result.value, 0, _U64)
        return result
    raise InvalidArgument(f"handle returned {_show(result)}: return None, kubewasm.DONE or "
                          "kubewasm.requeue_after(seconds)")


# ---- kinds --------------------------------------------------------------------

def gvk(group: str, version: str, kind: str) -> KindRef:
    """A kind-ref by group/version/kind (``""`` is the core group)."""
    return types.KindRef_Gvk(types.GroupVersionKind(
        _check_str("group", group), _check_str("version", version), _check_str("kind", kind)))


def resource(name: str) -> KindRef:
    """A kind-ref by kubectl resource name (``pods``, ``deployments.apps``,
    ``widgets.v1.example.com``), resolved by the host through discovery."""
    return types.KindRef_ResourceName(_check_str("resource name", name))


def kind_ref(value: Any, what: str = "kind") -> KindRef:
    """A kind-ref from a kind-ref, a :class:`GroupVersionKind` or a
    resource name (``"configmaps"``); :class:`InvalidArgument` otherwise."""
    if isinstance(value, types.KindRef_Gvk):
        g = value.value
        if not isinstance(g, types.GroupVersionKind):
            raise InvalidArgument(f"{what} must hold a GroupVersionKind, not {_show(g)}")
        gvk(g.group, g.version, g.kind)
        return value
    if isinstance(value, types.KindRef_ResourceName):
        _check_str(f"{what} resource name", value.value)
        return value
    if isinstance(value, types.GroupVersionKind):
        return gvk(value.group, value.version, value.kind)
    if isinstance(value, str):
        return resource(value)
    raise InvalidArgument(f"{what} must be a kind (kubewasm.kinds.X, kubewasm.gvk(...), "
                          f"kubewasm.resource(...) or a resource name), not {_show(value)}")


class kinds:  # noqa: N801 - a namespace of constants
    """Kind-refs of common kinds (group/version/kind)."""
    ConfigMap = gvk("", "v1", "ConfigMap")
    Namespace = gvk("", "v1", "Namespace")
    Node = gvk("", "v1", "Node")
    Pod = gvk("", "v1", "Pod")
    Secret = gvk("", "v1", "Secret")
    Service = gvk("", "v1", "Service")
    ServiceAccount = gvk("", "v1", "ServiceAccount")
    Deployment = gvk("apps", "v1", "Deployment")
    ReplicaSet = gvk("apps", "v1", "ReplicaSet")
    StatefulSet = gvk("apps", "v1", "StatefulSet")
    DaemonSet = gvk("apps", "v1", "DaemonSet")
    Job = gvk("batch", "v1", "Job")
    #: events.k8s.io/v1 Event: what ``actions.event`` records (recording
    #: needs no ``writes`` declaration; reading Events back needs a
    #: subscription, e.g. ``subscription(kinds.Event)``).
    Event = gvk("events.k8s.io", "v1", "Event")


#: events.k8s.io/v1 Event (the Rust SDK's ``EVENT``), same as ``kinds.Event``.
EVENT: KindRef = kinds.Event


def api_version(kind: Union[GroupVersionKind, KindRef]) -> str:
    """The ``apiVersion`` of a group/version/kind: ``apps/v1``, or ``v1``
    for the core group."""
    g = kind.value if isinstance(kind, types.KindRef_Gvk) else kind
    return f"{g.group}/{g.version}" if g.group else g.version


def gvk_from_api_version(api_version: str, kind: str) -> GroupVersionKind:
    """Splits an ``apiVersion`` (``apps/v1``, ``v1``) and pairs it with ``kind``."""
    group, _, version = api_version.rpartition("/")
    return types.GroupVersionKind(group, version, kind)


def kind_of(value: Any) -> Optional[GroupVersionKind]:
    """The group/version/kind of a delta's object (one host call; ``None``
    for ``synced``), an object (one host call), an :class:`ObjectMeta`, an
    :class:`OwnerReference`, a kind-ref by group/version/kind, or a
    :class:`GroupVersionKind`. ``None`` for a kind-ref by resource name."""
    if isinstance(value, types.Delta):
        return None if value.object is None else value.object.kind()
    if isinstance(value, types.Object):
        return value.kind()
    if isinstance(value, (types.ObjectMeta, types.OwnerReference)):
        return gvk_from_api_version(value.api_version, value.kind)
    if isinstance(value, types.KindRef_Gvk):
        return value.value
    if isinstance(value, types.GroupVersionKind):
        return value
    if isinstance(value, types.KindRef_ResourceName):
        return None
    raise InvalidArgument(f"kind_of takes a delta, object, metadata, owner reference or kind, not {_show(value)}")


def is_kind(value: Any, kind: Union[KindRef, GroupVersionKind]) -> bool:
    """Whether ``value`` (anything :func:`kind_of` takes) is of ``kind``'s
    group and kind, any version: ``is_kind(delta, kinds.Pod)``. To tell a
    delta's subscriptions apart without a host call, compare
    ``delta.subscription`` (its index in the registration) instead."""
    want = kind_of(kind)
    if want is None:
        raise InvalidArgument("is_kind needs a group/version/kind, not a resource name")
    got = kind_of(value)
    return got is not None and got.group == want.group and got.kind == want.kind


# ---- registration -------------------------------------------------------------

def _kind_text(kind: KindRef) -> str:
    if isinstance(kind, types.KindRef_Gvk):
        return f"{api_version(kind)}/{kind.value.kind}"
    return str(kind.value)


def _selector_text(value: Any, what: str) -> Optional[str]:
    if isinstance(value, (Selector, raw_selectors.LabelSelector)):
        text = value.to_string()
        return text or None
    return _check_str(what, value, optional=True)


def _subscription(s: Any, where: str) -> Subscription:
    if not isinstance(s, wit_handler.Subscription):
        raise InvalidArgument(f"{where} must be a kubewasm.subscription(...), not {_show(s)}")
    kind = kind_ref(s.kind, f"{where} kind")
    where = f"{where} to {_kind_text(kind)}"
    if isinstance(s.deltas, (str, DeltaType)) or not isinstance(s.deltas, _Iterable):
        raise InvalidArgument(f"{where}: deltas must be a list of delta types, not {_show(s.deltas)}")
    try:
        deltas = [_delta_type(d) for d in s.deltas]
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}: {e}") from None
    return wit_handler.Subscription(
        kind,
        _check_str(f"{where}: namespace", s.namespace, optional=True),
        _selector_text(s.label_selector, f"{where}: label selector"),
        _check_str(f"{where}: field selector", s.field_selector, optional=True),
        deltas,
        _check_strs(f"{where}: fields", s.fields),
        _check_int(f"{where}: resync_seconds", s.resync_seconds, 0, 2**32 - 1, optional=True),
    )


def subscription(kind: Union[KindRef, GroupVersionKind, str], namespace: Optional[str] = None,
                 labels: Union[str, "Selector", None] = None, field_selector: Optional[str] = None,
                 deltas: Optional[Iterable[Union[DeltaType, str]]] = None, fields: Iterable[str] = (),
                 resync_seconds: Optional[int] = None) -> Subscription:
    """One stream of deltas: objects of ``kind`` (a kind-ref, or a resource
    name such as ``"deployments.apps"``) in ``namespace`` (``None``: all),
    matching the label selector ``labels`` (text or a :class:`Selector`)
    and the field selector ``field_selector`` (``None``: every object).

    ``deltas``: the delta types to deliver, members or names (default
    :data:`OBJECT_DELTAS`: ``added``, ``updated``, ``deleted``,
    ``resync``; add ``"synced"`` to hear when the initial list is done;
    ``[]`` subscribes for cache reads only, see :func:`cache_only`).
    ``fields``: JSON pointers of the fields that matter: an update changing
    none of them (nor labels, annotations or the deletion timestamp) is not
    delivered (default ``()``: every update). ``resync_seconds``: replay
    every cached object as a ``resync`` delta this often (default ``None``:
    the host's default, 10 hours unless the operator changes it; ``0``:
    never). Raises :class:`InvalidArgument` on an unknown delta type name.
    """
    s = wit_handler.Subscription(kind, namespace, labels, field_selector,
                                 list(OBJECT_DELTAS) if deltas is None else deltas, fields, resync_seconds)
    return _subscription(s, "subscription")


def cache_only(kind: Union[KindRef, GroupVersionKind, str], namespace: Optional[str] = None,
               labels: Union[str, "Selector", None] = None, field_selector: Optional[str] = None) -> Subscription:
    """A subscription without deltas: it only makes ``kind`` readable
    through :class:`cache` (``subscription(kind, ..., deltas=[])``)."""
    return subscription(kind, namespace, labels, field_selector, deltas=[])


def index(name: str, kind: Union[KindRef, GroupVersionKind, str], pointer: str) -> Index:
    """A secondary index ``name`` over ``kind``, keyed by the value(s) at
    the JSON pointer ``pointer`` (a ``*`` segment iterates an array:
    ``/metadata/ownerReferences/*/uid``); read with ``cache.by_index``."""
    return _index(wit_handler.Index(name, kind, pointer), "index")


def _index(i: Any, where: str) -> Index:
    if not isinstance(i, wit_handler.Index):
        raise InvalidArgument(f"{where} must be a kubewasm.index(...), not {_show(i)}")
    return wit_handler.Index(_check_str(f"{where} name", i.name), kind_ref(i.kind, f"{where} kind"),
                             _check_str(f"{where} pointer", i.pointer))


def registration(subscriptions: Iterable[Subscription] = (),
                 writes: Iterable[Union[KindRef, GroupVersionKind, str]] = (),
                 indexes: Iterable[Index] = ()) -> Registration:
    """What ``register`` answers: the ``subscriptions`` (deltas name them
    by position, ``delta.subscription``), the kinds the plugin ``writes``
    (apply, patch, delete; Events need no declaration) and the secondary
    ``indexes``. All default to none."""
    return _registration(wit_handler.Registration(subscriptions, writes, indexes))


def _registration(r: Any) -> Registration:
    """Checks a registration as the host will lower it, converting enum
    names: a wrong value raises :class:`InvalidArgument` naming it (it would
    trap in the bindings)."""
    if not isinstance(r, wit_handler.Registration):
        raise InvalidArgument(f"registration() must return a kubewasm.registration(...), not {_show(r)}")
    for name in ("subscriptions", "writes", "indexes"):
        value = getattr(r, name)
        if isinstance(value, (str, _Mapping)) or not isinstance(value, _Iterable):
            raise InvalidArgument(f"registration {name} must be a list, not {_show(value)}")
    return wit_handler.Registration(
        [_subscription(s, f"subscription {i}") for i, s in enumerate(r.subscriptions)],
        [kind_ref(k, f"writes[{i}]") for i, k in enumerate(r.writes)],
        [_index(x, f"index {i}") for i, x in enumerate(r.indexes)],
    )


# ---- config and context -------------------------------------------------------

def parse_config(config: Union[Context, str], defaults: Mapping[str, Any]) -> Dict[str, Any]:
    """Decodes the config JSON (a :class:`Context` or its ``config`` text)
    against ``defaults``, a dict of every accepted key and its default
    value: empty or ``null`` is ``{}``; the result is ``defaults`` updated
    with the config's keys. An unknown key or a value of another type than
    the default raises ``ValueError("invalid config: ...")``, which refuses
    the version when raised from the plugin's ``__init__``."""
    text = config.config if isinstance(config, wit_handler.Context) else config
    try:
        value = json.loads(text) if text.strip() else None
    except ValueError as e:
        raise ValueError(f"invalid config: {e}") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ValueError("invalid config: expected an object")
    out = dict(defaults)
    for k, v in value.items():
        if k not in defaults:
            expected = ", ".join(f"`{d}`" for d in defaults)
            raise ValueError(f"invalid config: unknown field `{k}`, expected one of {expected}")
        want = type(defaults[k])
        if not (type(v) is want or (want is float and type(v) is int)):
            raise ValueError(f"invalid config: `{k}` must be a {want.__name__}")
        out[k] = v
    return out


_state: Dict[str, Any] = {}


def context() -> Optional[Context]:
    """The :class:`Context` this instance was registered with (``name``,
    ``version``: 12 hex digits of the component's SHA-256, ``config``);
    ``None`` before ``register``."""
    return _state.get("context")


def field_manager(ctx: Optional[Context] = None) -> str:
    """The field manager the host applies and patches with:
    ``kubewasm/<name>`` (of ``ctx``, default the registered context)."""
    ctx = ctx if ctx is not None else context()
    if ctx is None:
        raise InvalidArgument("field_manager: no context (called before register)")
    return f"kubewasm/{ctx.name}"


# ---- deltas and objects -------------------------------------------------------

def _key(namespace: Optional[str], name: str) -> str:
    return f"{namespace}/{name}" if namespace is not None else name


def key(value: Any) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects, of a
    delta (from its scalars, no host call; ``""`` for ``synced``), an
    object (two host calls), an :class:`ObjectMeta` or an :class:`ObjectRef`."""
    if isinstance(value, (types.Delta, types.ObjectMeta, raw_actions.ObjectRef)):
        return _key(value.namespace, value.name)
    if isinstance(value, types.Object):
        return _key(value.namespace(), value.name())
    raise InvalidArgument(f"key takes a delta, object, metadata or object reference, not {_show(value)}")


def object_of(delta: Delta) -> Object:
    """The delta's object, for a delta that must carry one (every type but
    ``synced``): the new state for updates, the last known state for
    deletes. :class:`Permanent` when it has none."""
    if delta.object is None:
        k = key(delta)
        at = f" for {k}" if k else ""
        raise Permanent(f"{wit_name(delta.delta_type)} delta{at} carries no object")
    return delta.object


def parts(delta: Delta) -> Tuple[ObjectMeta, Object]:
    """``(meta, object)`` of a delta that must carry an object
    (:func:`object_of`); ``meta`` is the whole metadata record, one host
    call that copies every label, annotation and owner: prefer the
    object's accessors (``obj.label(k)``...) when reading a few."""
    obj = object_of(delta)
    return obj.meta(), obj


def old_meta(delta: Delta) -> Optional[ObjectMeta]:
    """The previous state's whole metadata (``updated`` deltas only, else
    ``None``; one host call)."""
    return None if delta.old_object is None else delta.old_object.meta()


def delta_is(delta: Delta, *delta_types: Union[DeltaType, str]) -> bool:
    """Whether the delta's type is one of ``delta_types`` (members or names):
    ``delta_is(delta, "added", "resync")``."""
    return delta.delta_type in [_delta_type(t) for t in delta_types]


def retried(delta: Delta) -> bool:
    """Whether this delta was handled before and failed (``attempt > 1``;
    ``delta.last_failure`` says why)."""
    return delta.attempt > 1


_FAILURES = {
    types.Failure_Retry: "retry", types.Failure_Trapped: "trapped",
    types.Failure_Conflict: "conflict", types.Failure_ActionFailed: "action-failed",
}


def failure_kind(failure: Optional[Failure]) -> Optional[str]:
    """The WIT name of a :class:`Failure` (``retry``, ``trapped``,
    ``conflict``, ``action-failed``); ``None`` for ``None``."""
    return None if failure is None else _FAILURES[type(failure)]


def failure_message(failure: Optional[Failure]) -> Optional[str]:
    """A :class:`Failure`'s message; ``None`` for ``None``."""
    return None if failure is None else failure.value


def is_conflict(failure: Optional[Failure]) -> bool:
    """Whether an action hit a conflict (another field manager, or a uid or
    resourceVersion precondition that did not hold): re-read the cache and
    decide again. Takes ``delta.last_failure`` (or a delta)."""
    if isinstance(failure, types.Delta):
        failure = failure.last_failure
    return isinstance(failure, types.Failure_Conflict)


def _lookup(pairs: Sequence[Tuple[str, str]], k: str) -> Optional[str]:
    for name, value in pairs:
        if name == k:
            return value
    return None


def label(value: Union[Object, ObjectMeta], k: str) -> Optional[str]:
    """The value of label ``k`` on an object (one host call that copies only
    that value) or an :class:`ObjectMeta`; ``None`` when not set."""
    if isinstance(value, types.Object):
        return value.label(_check_str("label key", k))
    return _lookup(value.labels, k)


def annotation(value: Union[Object, ObjectMeta], k: str) -> Optional[str]:
    """The value of annotation ``k`` on an object (one host call) or an
    :class:`ObjectMeta`; ``None`` when not set."""
    if isinstance(value, types.Object):
        return value.annotation(_check_str("annotation key", k))
    return _lookup(value.annotations, k)


def is_terminating(value: Union[Object, ObjectMeta]) -> bool:
    """Whether the object is being finalized (has a deletion timestamp)."""
    if isinstance(value, types.Object):
        return value.deletion_timestamp() is not None
    return value.deletion_timestamp is not None


def has_finalizer(value: Union[Object, ObjectMeta], finalizer: str) -> bool:
    """Whether ``finalizer`` is among the object's finalizers."""
    current = value.finalizers() if isinstance(value, types.Object) else value.finalizers
    return finalizer in current


def field_value_json(value: FieldValue) -> Any:
    """A :class:`FieldValue` as a Python value (arrays and objects parsed:
    costs a parse of that subtree); :class:`Permanent` on invalid JSON."""
    if isinstance(value, types.FieldValue_Null):
        return None
    if isinstance(value, types.FieldValue_Json):
        try:
            return json.loads(value.value)
        except ValueError as e:
            raise Permanent(f"field is not valid JSON: {e}") from None
    return value.value



def field_json(obj: Object, pointer: str, missing: Any = None) -> Any:
    """The value at the JSON pointer ``pointer`` (``/data``,
    ``/spec/replicas``) as a Python value, ``missing`` (default ``None``)
    when the path does not exist; a JSON ``null`` is ``None``. One host
    call; only that subtree is copied and parsed."""
    v = obj.field(_check_str("pointer", pointer))
    if v is None:
        return missing
    try:
        return field_value_json(v)
    except Permanent:
        raise Permanent(f"field {pointer} is not valid JSON") from None


def fields_json(obj: Object, pointers: Sequence[str], missing: Any = None) -> List[Any]:
    """Several :func:`field_json` values in one host call, in order."""
    values = obj.fields(_check_strs("pointers", pointers))
    return [missing if v is None else field_value_json(v) for v in values]


def field_str(obj: Object, pointer: str) -> Optional[str]:
    """The string at ``pointer``; ``None`` when absent or not a string."""
    v = obj.field(_check_str("pointer", pointer))
    return v.value if isinstance(v, types.FieldValue_Text) else None


def field_int(obj: Object, pointer: str) -> Optional[int]:
    """The integer at ``pointer``; ``None`` when absent or not an integer."""
    v = obj.field(_check_str("pointer", pointer))
    return v.value if isinstance(v, types.FieldValue_Integer) else None


def field_bool(obj: Object, pointer: str) -> Optional[bool]:
    """The boolean at ``pointer``; ``None`` when absent or not a boolean."""
    v = obj.field(_check_str("pointer", pointer))
    return v.value if isinstance(v, types.FieldValue_Boolean) else None


# ---- references and preconditions ---------------------------------------------

def object_ref(kind: Union[KindRef, GroupVersionKind, str], source: Any = None,
               name: Optional[str] = None) -> ObjectRef:
    """A reference to an object of ``kind``: ``object_ref(kind, namespace,
    name)`` (namespace ``None`` if cluster-scoped), or
    ``object_ref(kind, source)`` with the namespace and name of a delta
    (its scalars, no host call), an object (two host calls) or an
    :class:`ObjectMeta`."""
    kind = kind_ref(kind)
    if name is not None:
        return raw_actions.ObjectRef(kind, _check_str("namespace", source, optional=True),
                                     _check_str("name", name))
    if isinstance(source, (types.Delta, types.ObjectMeta)):
        return raw_actions.ObjectRef(kind, source.namespace, source.name)
    if isinstance(source, types.Object):
        return raw_actions.ObjectRef(kind, source.namespace(), source.name())
    raise InvalidArgument("object_ref takes (kind, namespace, name) or (kind, delta|object|meta), "
                          f"not a source {_show(source)}")


def object_ref_of(value: Union[Object, Delta, ObjectMeta]) -> ObjectRef:
    """A reference to an object with its own group/version/kind: of an
    object (three host calls), a delta's object (one host call; a
    ``synced`` delta raises :class:`Permanent`) or an :class:`ObjectMeta`."""
    if isinstance(value, types.Delta):
        g = object_of(value).kind()
        return raw_actions.ObjectRef(types.KindRef_Gvk(g), value.namespace, value.name)
    if isinstance(value, types.Object):
        return raw_actions.ObjectRef(types.KindRef_Gvk(value.kind()), value.namespace(), value.name())
    if isinstance(value, types.ObjectMeta):
        g = gvk_from_api_version(value.api_version, value.kind)
        return raw_actions.ObjectRef(types.KindRef_Gvk(g), value.namespace, value.name)
    raise InvalidArgument(f"object_ref_of takes an object, a delta or metadata, not {_show(value)}")


def owner_object_ref(owner: OwnerReference, namespace: Optional[str]) -> ObjectRef:
    """A reference to an owner, in ``namespace`` (owners share their
    dependent's namespace, or are cluster-scoped: pass ``None``). Guard a
    write to it with ``preconditions(uid=owner.uid)``."""
    g = gvk_from_api_version(owner.api_version, owner.kind)
    return raw_actions.ObjectRef(types.KindRef_Gvk(g), namespace, owner.name)


def preconditions(uid: Optional[str] = None, resource_version: Optional[str] = None) -> Preconditions:
    """Conditions the server checks before a write (a write whose
    precondition does not hold fails as a conflict, which the next
    attempt's ``delta.last_failure`` reports): the object must have this
    ``uid`` (it was not deleted and recreated) and/or be at this
    ``resource_version`` (nobody wrote it since it was read). ``None`` or
    ``""`` sets none; ``preconditions()`` is no precondition."""
    return raw_actions.Preconditions(_check_str("uid precondition", uid, optional=True) or None,
                                     _check_str("resourceVersion precondition", resource_version,
                                                optional=True) or None)


def preconditions_of(value: Union[Object, Delta, ObjectMeta], resource_version: bool = True) -> Preconditions:
    """The uid and (unless ``resource_version=False``) resourceVersion of an
    object (two host calls), a delta (its scalars, no host call) or an
    :class:`ObjectMeta`: the write happens only if nobody changed the
    object since."""
    if isinstance(value, types.Object):
        return preconditions(value.uid(), value.resource_version() if resource_version else None)
    if isinstance(value, (types.Delta, types.ObjectMeta)):
        return preconditions(value.uid, value.resource_version if resource_version else None)
    raise InvalidArgument(f"preconditions_of takes an object, a delta or metadata, not {_show(value)}")


_preconditions_new = preconditions


def _preconditions(value: Any) -> Preconditions:
    if value is None:
        return raw_actions.Preconditions(None, None)
    if isinstance(value, raw_actions.Preconditions):
        return preconditions(value.uid, value.resource_version)
    raise InvalidArgument("preconditions must be kubewasm.preconditions(...), "
                          f"kubewasm.preconditions_of(...) or None, not {_show(value)}")


def _target(value: Any, what: str = "target") -> ObjectRef:
    if isinstance(value, types.Object):
        return object_ref_of(value)
    if not isinstance(value, raw_actions.ObjectRef):
        raise InvalidArgument(f"{what} must be a kubewasm.object_ref(...) or an object, not {_show(value)}")
    return raw_actions.ObjectRef(kind_ref(value.kind, f"{what} kind"),
                                 _check_str(f"{what} namespace", value.namespace, optional=True),
                                 _check_str(f"{what} name", value.name))


# ---- label selectors ------------------------------------------------------------

class Selector:
    """A label selector with the API server's grammar (``app=web,tier!=db,
    env in (a,b),!legacy``), parsed and matched by the host (the
    ``selectors.label-selector`` resource): every language agrees. The
    empty selector matches everything."""

    __slots__ = ("raw",)

    def __init__(self, raw: LabelSelector) -> None:
        """Wraps a host :class:`LabelSelector`; use :meth:`parse`."""
        self.raw = raw

    @staticmethod
    def parse(text: str) -> "Selector":
        """Parses ``text`` on the host; ``ValueError`` naming the offending
        part (``invalid selector "a=(": ...``)."""
        try:
            return Selector(raw_selectors.LabelSelector.parse(_check_str("label selector", text)))
        except Err as e:
            raise ValueError(str(e.value)) from None

    @staticmethod
    def everything() -> "Selector":
        """The empty selector, which matches everything."""
        return Selector.parse("")

    def matches(self, labels: Union[Object, ObjectMeta, Mapping[str, str], Iterable[Tuple[str, str]]]) -> bool:
        """Whether labels match: an object's (read on the host, nothing
        copied), an :class:`ObjectMeta`'s, a dict, or ``(key, value)`` pairs."""
        if isinstance(labels, types.Object):
            return self.raw.matches_object(labels)
        if isinstance(labels, types.ObjectMeta):
            labels = labels.labels
        elif isinstance(labels, _Mapping):
            labels = labels.items()
        pairs = [(_check_str("label key", k), _check_str("label value", v)) for k, v in labels]
        return self.raw.matches(pairs)

    def matches_object(self, obj: Object) -> bool:
        """Whether an object's labels match (one host call, nothing copied)."""
        return self.raw.matches_object(obj)

    def to_string(self) -> str:
        """The canonical text (requirements sorted by key), from the host."""
        return self.raw.to_string()

    def is_empty(self) -> bool:
        """Whether this is the empty selector (matches everything)."""
        return self.to_string() == ""

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return f"Selector({self.to_string()!r})"


def parse_selector(text: str) -> Selector:
    """:meth:`Selector.parse`."""
    return Selector.parse(text)


# ---- owner references -----------------------------------------------------------

def find_owner(obj: Union[Object, ObjectMeta], kind: Union[KindRef, GroupVersionKind]) -> Optional[OwnerReference]:
    """The first owner reference of ``obj`` (in ``metadata.ownerReferences``
    order) of ``kind``'s group and kind, any version:
    ``find_owner(pod, kinds.ReplicaSet)``. One host call for an object."""
    owners = obj.owner_references() if isinstance(obj, types.Object) else obj.owner_references
    for o in owners:
        if is_kind(o, kind):
            return o
    return None


def controller_owner(obj: Union[Object, ObjectMeta]) -> Optional[OwnerReference]:
    """The owner reference of ``obj`` marked ``controller: true``, if any
    (one host call for an object)."""
    if isinstance(obj, types.Object):
        return obj.controller()
    return next((o for o in obj.owner_references if o.controller), None)


def controller_of(kind: Union[KindRef, GroupVersionKind], name: str, uid: str) -> OwnerReference:
    """A controller reference (``controller`` and ``blockOwnerDeletion``
    true) to the object of ``kind`` named ``name`` with uid ``uid``."""
    g = kind_of(kind)
    if g is None:
        raise InvalidArgument("controller_of needs a group/version/kind, not a resource name")
    return types.OwnerReference(api_version(g), g.kind, _check_str("owner name", name),
                                _check_str("owner uid", uid), True, True)


def controller_ref(obj: Object) -> OwnerReference:
    """A controller reference to ``obj`` (its apiVersion, kind, name and
    uid), to embed in what the plugin creates so that it is garbage-collected
    with ``obj``. Three host calls."""
    return controller_of(obj.kind(), obj.name(), obj.uid())


def owner_reference_json(ref: OwnerReference) -> Dict[str, Any]:
    """The JSON form of a ``metadata.ownerReferences`` entry: ``apiVersion``,
    ``kind``, ``name``, ``uid``, then ``controller`` and
    ``blockOwnerDeletion`` only when true."""
    out: Dict[str, Any] = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}
    if ref.controller:
        out["controller"] = True
    if ref.block_owner_deletion:
        out["blockOwnerDeletion"] = True
    return out


def set_owner_reference(dependent: Dict[str, Any], reference: OwnerReference) -> None:
    """Adds ``reference`` to the dict ``dependent``'s
    ``metadata.ownerReferences`` (creating ``metadata`` and the list as
    needed), replacing an entry for the same owner (same uid, or same
    group, kind and name). :class:`Permanent` when ``dependent`` is not a
    dict, its metadata or list is malformed, or ``reference`` is a
    controller and another owner already is (an object has at most one)."""
    if not isinstance(dependent, dict):
        raise Permanent("owner reference: the dependent is not a JSON object")
    meta = dependent.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise Permanent("owner reference: metadata is not a JSON object")
    if meta.get("ownerReferences") is None:
        meta["ownerReferences"] = []
    entries = meta["ownerReferences"]
    if not isinstance(entries, list):
        raise Permanent("owner reference: metadata.ownerReferences is not a list")
    group = gvk_from_api_version(reference.api_version, reference.kind).group

    def field(entry: Any, k: str) -> str:
        v = entry.get(k) if isinstance(entry, dict) else None
        return v if isinstance(v, str) else ""

    def same(entry: Any) -> bool:
        return field(entry, "uid") == reference.uid or (
            gvk_from_api_version(field(entry, "apiVersion"), field(entry, "kind")).group == group
            and field(entry, "kind") == reference.kind and field(entry, "name") == reference.name)

    if reference.controller:
        for other in entries:
            if isinstance(other, dict) and other.get("controller") is True and not same(other):
                raise Permanent(f"owner reference: already controlled by {field(other, 'kind')} "
                                f"{field(other, 'name')}")
    entry = owner_reference_json(reference)
    for i, existing in enumerate(entries):
        if same(existing):
            entries[i] = entry
            return
    entries.append(entry)


def set_controller_reference(dependent: Dict[str, Any], owner: Object) -> None:
    """Makes ``owner`` the controller of the dict ``dependent`` (what you
    then pass to ``actions.apply``): :func:`set_owner_reference` with
    :func:`controller_ref` ``(owner)``."""
    set_owner_reference(dependent, controller_ref(owner))


# ---- patches, finalizers, events ------------------------------------------------

def annotations_patch(annotations: Mapping[str, Optional[str]]) -> Dict[str, Any]:
    """The merge patch setting these annotations (``None`` removes one):
    ``{"metadata": {"annotations": {...}}}``."""
    return {"metadata": {"annotations": dict(annotations)}}


def add_finalizer_patch(current: Sequence[str], finalizer: str) -> Optional[JsonPatch]:
    """The JSON patch adding ``finalizer`` to an object whose finalizers are
    ``current``: ``add /metadata/finalizers/-`` (or ``add
    /metadata/finalizers`` with ``[finalizer]`` when there are none);
    ``None`` when it is already there. Send it with a resourceVersion
    precondition (as ``actions.add_finalizer`` does): a concurrent write
    then fails the patch as a conflict."""
    if finalizer in current:
        return None
    if not current:
        return JsonPatch().add("/metadata/finalizers", [finalizer])
    return JsonPatch().add("/metadata/finalizers/-", finalizer)


def remove_finalizer_patch(current: Sequence[str], finalizer: str) -> Optional[JsonPatch]:
    """The JSON patch removing ``finalizer`` from an object whose finalizers
    are ``current``: one ``remove /metadata/finalizers/<i>`` per
    occurrence, highest index first; ``None`` when it is not there. Indexes
    are only safe with a resourceVersion precondition (as
    ``actions.remove_finalizer`` sends it)."""
    at = [i for i, f in enumerate(current) if f == finalizer]
    if not at:
        return None
    p = JsonPatch()
    for i in reversed(at):
        p.remove(f"/metadata/finalizers/{i}")
    return p


def event_record(regarding: Union[ObjectRef, Object], event_type: Union[EventType, str], reason: str,
                 note: str, regarding_uid: Optional[str] = None) -> EventRecord:
    """An Event about ``regarding`` (a reference, or an object: then with
    its uid unless ``regarding_uid`` is given): ``event_type`` ``"Normal"``
    or ``"Warning"``, ``reason`` UpperCamelCase and short
    (``ReplicaCreated``), ``note`` human-readable (1 KiB kept)."""
    if isinstance(regarding, types.Object) and regarding_uid is None:
        regarding_uid = regarding.uid()
    return _event(raw_actions.Event(regarding, regarding_uid, event_type, reason, note))


def _event(e: Any) -> EventRecord:
    if not isinstance(e, raw_actions.Event):
        raise InvalidArgument(f"record_event takes a kubewasm.event_record(...), not {_show(e)}")
    return raw_actions.Event(_target(e.regarding, "regarding"),
                             _check_str("regarding uid", e.regarding_uid, optional=True) or None,
                             _event_type(e.event_type), _check_str("event reason", e.reason),
                             _check_str("event note", e.note))


# ---- cache ------------------------------------------------------------------------

def _cache_refused(e: Err) -> Permanent:
    v = e.value
    if isinstance(v, raw_cache.CacheError_NotSubscribed):
        return Permanent(f"cache read refused, not subscribed: {v.value}")
    if isinstance(v, raw_cache.CacheError_UnknownIndex):
        return Permanent(f"cache read refused, unknown index: {v.value}")
    if isinstance(v, raw_cache.CacheError_InvalidSelector):
        return Permanent(f"cache read refused, invalid selector: {v.value}")
    return Permanent(f"cache read refused, not granted: {v.value}")


class cache:  # noqa: N801 - a namespace of functions
    """Reads of the host's lister cache: never an API call, only kinds the
    plugin subscribed to (a :func:`cache_only` subscription suffices).
    Every refusal (unsubscribed kind, unknown index, bad selector, a read
    the sidecar does not grant) raises :class:`Permanent`."""

    @staticmethod
    def get(kind: Union[KindRef, GroupVersionKind, str], namespace: Optional[str], name: str) -> Optional[Object]:
        """One object by kind, namespace (``None`` if cluster-scoped) and
        name; ``None`` when not cached."""
        k = kind_ref(kind)
        ns = _check_str("namespace", namespace, optional=True)
        try:
            return raw_cache.get(k, ns, _check_str("name", name))
        except Err as e:
            raise _cache_refused(e) from None

    @staticmethod
    def list(kind: Union[KindRef, GroupVersionKind, str], namespace: Optional[str] = None,
             label_selector: Union[str, Selector, None] = None) -> List[Object]:
        """Objects of a kind in one namespace or all (``None``, the
        default), optionally filtered by a label selector (text or a
        :class:`Selector`; default ``None``: all); sorted by namespace then
        name."""
        k = kind_ref(kind)
        ns = _check_str("namespace", namespace, optional=True)
        sel = _selector_text(label_selector, "label selector")
        try:
            return raw_cache.list(k, ns, sel)
        except Err as e:
            raise _cache_refused(e) from None

    @staticmethod
    def by_index(index_name: str, value: str) -> List[Object]:
        """Objects whose declared index yields ``value``; sorted by
        namespace then name."""
        try:
            return raw_cache.by_index(_check_str("index", index_name), _check_str("index value", value))
        except Err as e:
            raise _cache_refused(e) from None


# ---- actions ------------------------------------------------------------------------

def _action(f: Callable[..., None], *args: Any) -> None:
    try:
        f(*args)
    except Err as e:
        v = e.value
        if isinstance(v, raw_actions.ActionError_NotDeclared):
            raise Permanent(f"action refused, not declared in writes: {v.value}") from None
        if isinstance(v, raw_actions.ActionError_Forbidden):
            raise Permanent(f"action refused, not granted: {v.value}") from None
        raise Permanent(f"action refused as invalid: {v.value}") from None


def _object_json(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        raise InvalidArgument(f"apply takes a dict (or JSON text), not {_show(obj)}")
    return to_json(obj)


def _patch_text(patch: Any) -> str:
    if isinstance(patch, str):
        return patch
    if isinstance(patch, JsonPatch):
        return str(patch)
    if isinstance(patch, (dict, list)):
        return to_json(patch)
    raise InvalidArgument(f"a patch must be a dict, a list, a JsonPatch or JSON text, not {_show(patch)}")


def _finalizer_patch(obj: Object, build: Callable[[Sequence[str], str], Optional[JsonPatch]],
                     finalizer: str) -> bool:
    rv = obj.resource_version()
    patch = build(obj.finalizers(), _check_str("finalizer", finalizer))
    if patch is None:
        return False
    actions.patch_json(object_ref_of(obj), patch, _preconditions_new(obj.uid(), rv))
    return True


class actions:  # noqa: N801 - a namespace of functions
    """Writes. Each call is validated by the host at once (the kind declared
    in the registration's ``writes`` and granted by the sidecar, the JSON
    well formed) and buffered; the host executes the buffer in order after
    ``handle`` returns, and drops it when ``handle`` raises. A refusal is a
    bug in the plugin or its sidecar: :class:`Permanent`.

    Every write takes ``preconditions`` (default ``None``: none; see
    :func:`preconditions`, :func:`preconditions_of`) that the server checks:
    one that does not hold fails the write as a conflict, which the next
    attempt's ``delta.last_failure`` reports. ``target`` is a
    :func:`object_ref` or an object (then with its own kind)."""

    @staticmethod
    def apply(obj: Union[Dict[str, Any], str], force: bool = True,
              preconditions: Optional[Preconditions] = None) -> None:
        """Server-side apply of ``obj`` (a dict, or JSON text, with
        ``apiVersion``, ``kind``, ``metadata.name`` and, if namespaced,
        ``metadata.namespace``) as field manager ``kubewasm/<plugin>``;
        ``force`` (default ``True``) takes over conflicting fields."""
        _action(raw_actions.apply, _object_json(obj), bool(force), _preconditions(preconditions))

    @staticmethod
    def apply_status(obj: Union[Dict[str, Any], str], preconditions: Optional[Preconditions] = None) -> None:
        """Server-side apply to the status subresource (forced)."""
        _action(raw_actions.apply_status, _object_json(obj), _preconditions(preconditions))

    @staticmethod
    def patch(target: Union[ObjectRef, Object], patch_type: Union[PatchType, str],
              patch: Union[Dict[str, Any], List[Any], JsonPatch, str],
              preconditions: Optional[Preconditions] = None) -> None:
        """A patch of type ``patch_type`` (``"merge"``: RFC 7386, ``"json"``:
        RFC 6902), given as a dict/list, a :class:`JsonPatch` or JSON text."""
        _action(raw_actions.patch, _target(target), _patch_type(patch_type), _patch_text(patch),
                _preconditions(preconditions))

    @staticmethod
    def patch_merge(target: Union[ObjectRef, Object], patch: Union[Dict[str, Any], str],
                    preconditions: Optional[Preconditions] = None) -> None:
        """An RFC 7386 JSON merge patch (a dict or JSON text)."""
        _action(raw_actions.patch, _target(target), PatchType.MERGE, _patch_text(patch),
                _preconditions(preconditions))

    @staticmethod
    def patch_json(target: Union[ObjectRef, Object], patch: Union[JsonPatch, List[Any], str],
                   preconditions: Optional[Preconditions] = None) -> None:
        """An RFC 6902 JSON patch (a :class:`JsonPatch`, a list of
        operations or JSON text)."""
        _action(raw_actions.patch, _target(target), PatchType.JSON, _patch_text(patch),
                _preconditions(preconditions))

    @staticmethod
    def annotate(target: Union[ObjectRef, Object], annotations: Mapping[str, Optional[str]],
                 preconditions: Optional[Preconditions] = None) -> None:
        """Sets annotations on ``target`` with one merge patch
        (:func:`annotations_patch`; a ``None`` value removes one)."""
        actions.patch_merge(target, annotations_patch(annotations), preconditions)

    @staticmethod
    def annotate_object(obj: Object, annotations: Mapping[str, Optional[str]]) -> None:
        """:meth:`annotate` on ``obj`` itself (its own kind), guarded by its uid."""
        actions.annotate(object_ref_of(obj), annotations, _preconditions_new(uid=obj.uid()))

    @staticmethod
    def delete(target: Union[ObjectRef, Object], propagation: Union[Propagation, str] = Propagation.BACKGROUND,
               preconditions: Optional[Preconditions] = None) -> None:
        """Deletes an object (one already gone is not an error) with
        ``propagation`` ``"background"`` (the default), ``"foreground"`` or
        ``"orphan"``."""
        _action(raw_actions.delete, _target(target), _propagation(propagation),
                _preconditions(preconditions))

    @staticmethod
    def delete_object(obj: Object, propagation: Union[Propagation, str] = Propagation.BACKGROUND) -> None:
        """:meth:`delete` of ``obj`` itself (its own kind), guarded by its uid
        (a namesake created since is left alone)."""
        actions.delete(object_ref_of(obj), propagation, _preconditions_new(uid=obj.uid()))

    @staticmethod
    def record_event(event: EventRecord) -> None:
        """Records an events.k8s.io/v1 Event (:func:`event_record`). The
        host reports it as controller ``kubewasm``, action the plugin's
        name, instance ``<host>/<plugin>@<version>``, and folds repeats into
        one Event with a series count. Events need no ``writes``
        declaration, only the sidecar's ``events`` grant."""
        _action(raw_actions.record_event, _event(event))

    @staticmethod
    def event(regarding: Union[ObjectRef, Object], event_type: Union[EventType, str], reason: str, note: str,
              regarding_uid: Optional[str] = None) -> None:
        """Records an Event about ``regarding`` (:func:`event_record`):
        ``actions.event(ref, "Warning", "CrashLooping", "restarted 5 times")``."""
        actions.record_event(event_record(regarding, event_type, reason, note, regarding_uid))

    @staticmethod
    def event_about(obj: Object, event_type: Union[EventType, str], reason: str, note: str) -> None:
        """Records an Event about ``obj`` (its kind, namespace, name and uid)."""
        actions.record_event(event_record(obj, event_type, reason, note))

    @staticmethod
    def add_finalizer(obj: Object, finalizer: str) -> bool:
        """Adds ``finalizer`` to ``obj`` unless it is already there: one JSON
        patch (:func:`add_finalizer_patch`) with uid and resourceVersion
        preconditions, so a concurrent write fails it as a conflict instead
        of losing either change. Returns whether a patch was queued."""
        return _finalizer_patch(obj, add_finalizer_patch, finalizer)

    @staticmethod
    def remove_finalizer(obj: Object, finalizer: str) -> bool:
        """Removes ``finalizer`` from ``obj`` if it is there: one JSON patch
        (:func:`remove_finalizer_patch`) with uid and resourceVersion
        preconditions. Returns whether a patch was queued."""
        return _finalizer_patch(obj, remove_finalizer_patch, finalizer)


# ---- log and clock --------------------------------------------------------------------

def _fields(fields: Any) -> List[Tuple[str, str]]:
    items = fields.items() if isinstance(fields, _Mapping) else (fields or ())
    return [(str(k), str(v)) for k, v in items]


def _writer(level: Level) -> Callable[..., None]:
    def write(message: str, **fields: Any) -> None:
        if raw_log.enabled(level):
            raw_log.write(level, str(message), _fields(fields))
    write.__doc__ = f"A ``{wit_name(level)}`` record: ``log.{wit_name(level)}(\"msg\", key=value, ...)``."
    return write


class log:  # noqa: N801 - a namespace of functions
    """Structured logging into the host's log, tagged with the plugin's
    name: ``log.info("copy deleted", copy=k, source=s)`` (field values are
    turned into text with ``str``)."""

    trace = staticmethod(_writer(Level.TRACE))
    debug = staticmethod(_writer(Level.DEBUG))
    info = staticmethod(_writer(Level.INFO))
    warn = staticmethod(_writer(Level.WARN))
    error = staticmethod(_writer(Level.ERROR))

    @staticmethod
    def enabled(level: Union[Level, str]) -> bool:
        """Whether a record at ``level`` would be written: check before
        building a costly message."""
        return raw_log.enabled(_log_level(level))

    @staticmethod
    def write(level: Union[Level, str], message: str,
              fields: Union[Mapping[str, Any], Iterable[Tuple[str, Any]], None] = None) -> None:
        """A record at ``level`` (a member or ``"info"``...) with fields (a
        dict or pairs; default none)."""
        raw_log.write(_log_level(level), str(message), _fields(fields))


class clock:  # noqa: N801 - a namespace of functions
    """The host's clock."""

    @staticmethod
    def now() -> Any:
        """Wall-clock time since the Unix epoch (``.seconds``, ``.nanoseconds``)."""
        return raw_clock.now()

    @staticmethod
    def now_rfc3339() -> str:
        """Now as RFC 3339 with seconds precision (``2026-11-22T17:00:00Z``)."""
        return raw_clock.now_rfc3339()


# ---- the export ---------------------------------------------------------------------

class Plugin:
    """Base class of a plugin. The host instantiates the component once per
    loaded version and calls ``PluginClass(ctx)`` with the :class:`Context`
    (``ctx.name``, ``ctx.version``, ``ctx.config``: the sidecar's config as
    JSON, decode it with :func:`parse_config`; raise to refuse the version),
    then ``registration()``, then ``handle(delta)`` once per delta, one at
    a time. The instance lives as long as the component instance: parsed
    configuration and state belong on it.

    ``handle`` returns ``None`` or :data:`DONE` when finished, or
    :func:`requeue_after` to see the object again; it raises :class:`Retry`
    for transient conditions and :class:`Permanent` (or anything else) for
    input that will never work. Actions it emitted run only if it returns."""

    def __init__(self, ctx: Context) -> None:
        """Keeps the context as ``self.context``."""
        self.context = ctx

    def registration(self) -> Registration:
        """What the plugin subscribes to, writes and indexes (default: nothing)."""
        return registration()

    def handle(self, delta: Delta) -> Optional[Handled]:
        """Handles one delta (default: nothing)."""
        return None


def handler(plugin_class: Type[Any]) -> Type[Any]:
    """The ``Handler`` export class for a plugin class (a :class:`Plugin`):
    in the app module, ``Handler = kubewasm.handler(MyPlugin)``. A failure in
    ``__init__`` or ``registration`` (an invalid config, an unknown enum
    name) refuses the version with its message; ``handle``'s exceptions
    become handler errors (:class:`Retry` retried, all others permanent)."""

    class Handler(exports.Handler):
        def register(self, context: Context) -> Registration:
            try:
                p = plugin_class(context)
                r = _registration(p.registration())
            except Exception as e:  # noqa: BLE001 - every failure refuses the version
                raise Err(_message(e)) from None
            _state["context"] = context
            _state["plugin"] = p
            return r

        def handle(self, delta: Delta) -> Handled:
            p = _state.get("plugin")
            if p is None:
                raise Err(wit_handler.HandlerError_Permanent("handle called before register"))
            try:
                return _handled(p.handle(delta))
            except Retry as e:
                raise Err(wit_handler.HandlerError_Retry(_message(e))) from None
            except Err as e:
                if isinstance(e.value, (wit_handler.HandlerError_Retry, wit_handler.HandlerError_Permanent)):
                    raise
                raise Err(wit_handler.HandlerError_Permanent(_message(e))) from None
            except Exception as e:  # noqa: BLE001 - a bug or bad input: do not retry
                raise Err(wit_handler.HandlerError_Permanent(_message(e))) from None

    Handler.__name__ = Handler.__qualname__ = "Handler"
    return Handler
