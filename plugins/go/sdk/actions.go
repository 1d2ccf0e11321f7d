package kubewasm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Actions are validated by the host at once (the kind declared in Writes
// and granted by the sidecar, the JSON well formed) and buffered; the host
// runs them in order after Handle returns a nil error. A refused action is
// a bug in the plugin or its sidecar: every refusal is a permanent error
// wrapping an *ActionError.
//
// Every write takes Preconditions the server checks (uid, resourceVersion;
// the zero value is none): one that does not hold fails the write as a
// conflict, which the next attempt's delta reports (LastFailure with
// FailureConflict). The *Object variants target an object you read and
// guard the write with its uid.

// Preconditions are conditions the server checks before a write; "" is
// none. The zero value sets no precondition.
type Preconditions struct {
	// UID: the object must have this uid (it was not deleted and recreated
	// under the same name).
	UID string
	// ResourceVersion: the object must be at this resourceVersion (nobody
	// wrote it since it was read).
	ResourceVersion string
}

// NoPreconditions is the zero Preconditions: the write happens whatever
// the object's state.
var NoPreconditions = Preconditions{}

// UIDPrecondition: the object must have this uid ("" sets none).
func UIDPrecondition(uid string) Preconditions { return Preconditions{UID: uid} }

// PreconditionsOf are the object's uid and resourceVersion, as read (two
// host calls): the write happens only if nobody changed it since.
func PreconditionsOf(o *Object) Preconditions {
	return Preconditions{UID: o.UID(), ResourceVersion: o.ResourceVersion()}
}

// WithUID sets (or with "" clears) the uid precondition.
func (p Preconditions) WithUID(uid string) Preconditions {
	p.UID = uid
	return p
}

// WithResourceVersion sets (or with "" clears) the resourceVersion
// precondition.
func (p Preconditions) WithResourceVersion(resourceVersion string) Preconditions {
	p.ResourceVersion = resourceVersion
	return p
}

// UIDOnly keeps the uid precondition only.
func (p Preconditions) UIDOnly() Preconditions { return Preconditions{UID: p.UID} }

// IsNone reports whether no precondition is set.
func (p Preconditions) IsNone() bool { return p.UID == "" && p.ResourceVersion == "" }

// ObjectRef names the target of an action. Namespace "" is none
// (cluster-scoped objects).
type ObjectRef struct {
	Kind            KindRef
	Namespace, Name string
}

// Ref is a reference by kind, namespace ("" if cluster-scoped) and name.
func Ref(kind KindRef, namespace, name string) ObjectRef {
	return ObjectRef{Kind: kind, Namespace: namespace, Name: name}
}

// RefTo is a reference of kind kind to the object meta describes.
func RefTo(kind KindRef, meta *ObjectMeta) ObjectRef {
	return ObjectRef{Kind: kind, Namespace: meta.Namespace, Name: meta.Name}
}

// RefToObject is a reference of kind kind to o (two host calls: namespace,
// name).
func RefToObject(kind KindRef, o *Object) ObjectRef {
	return ObjectRef{Kind: kind, Namespace: o.Namespace(), Name: o.Name()}
}

// RefOf is a reference to o with its own group/version/kind (three host
// calls: kind, namespace, name).
func RefOf(o *Object) ObjectRef { return RefToObject(o.Kind().Ref(), o) }

// OwnerRef is a reference to an owner, in namespace (owners share their
// dependent's namespace, or are cluster-scoped: ""). Guard a write to it
// with UIDPrecondition(owner.UID).
func OwnerRef(owner OwnerReference, namespace string) ObjectRef {
	return ObjectRef{Kind: owner.GVK().Ref(), Namespace: namespace, Name: owner.Name}
}

// Key is `namespace/name`, or `name` for cluster-scoped objects.
func (r ObjectRef) Key() string { return key(r.Namespace, r.Name) }

// ActionErrorKind says why the host refused an action.
type ActionErrorKind uint8

const (
	// NotDeclared: the kind is not among the registration's Writes.
	NotDeclared ActionErrorKind = iota
	// Invalid: the action is malformed (bad JSON, missing apiVersion, kind
	// or name).
	Invalid
	// WriteForbidden: the sidecar's access list does not grant the write.
	WriteForbidden
)

// ActionError is an action the host refused before queueing it; the
// permanent errors of the action functions wrap it (errors.As).
type ActionError struct {
	Kind    ActionErrorKind
	Message string
}

// Error is the message a refused action reports: `action refused, <why>: <host message>`.
func (e *ActionError) Error() string {
	switch e.Kind {
	case NotDeclared:
		return "action refused, not declared in writes: " + e.Message
	case Invalid:
		return "action refused as invalid: " + e.Message
	case WriteForbidden:
		return "action refused, not granted: " + e.Message
	}
	return fmt.Sprintf("action refused (%d): %s", e.Kind, e.Message)
}

// PatchType is MergePatch (RFC 7386) or JSONPatchType (RFC 6902).
type PatchType uint8

const (
	// MergePatch: an RFC 7386 JSON merge patch.
	MergePatch PatchType = iota
	// JSONPatchType: an RFC 6902 JSON patch (build it with JSONPatch).
	JSONPatchType
)

// Propagation is a delete propagation policy.
type Propagation uint8

const (
	// Background: the object goes at once, its dependents after it.
	Background Propagation = iota
	// Foreground: the dependents go first, then the object.
	Foreground
	// Orphan: the dependents are kept (their owner reference removed).
	Orphan
)

// EventType is Normal or Warning.
type EventType uint8

const (
	// Normal: something expected happened.
	Normal EventType = iota
	// Warning: something needs attention.
	Warning
)

// Marshal is how actions encode values that are not already JSON text: a
// string or []byte or json.RawMessage is sent as it is, anything else with
// encoding/json (HTML characters not escaped). Errors are permanent.
func Marshal(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case []byte:
		return string(t), nil
	case json.RawMessage:
		return string(t), nil
	case JSONPatch:
		return t.Encode()
	case *JSONPatch:
		return t.Encode()
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", Permanentf("cannot encode action: %v", err)
	}
	return string(bytes.TrimRight(b.Bytes(), "\n")), nil
}

// Apply server-side applies object (JSON text, or a value encoding/json
// marshals, with apiVersion, kind, metadata.name and, if namespaced,
// metadata.namespace) as field manager `kubewasm/<plugin>`; force takes
// over conflicting fields.
func Apply(object any, force bool, pre Preconditions) error {
	text, err := Marshal(object)
	if err != nil {
		return err
	}
	return refused(theHost().apply(text, force, pre))
}

// ApplyStatus server-side applies object to the status subresource.
func ApplyStatus(object any, pre Preconditions) error {
	text, err := Marshal(object)
	if err != nil {
		return err
	}
	return refused(theHost().applyStatus(text, pre))
}

// Patch patches target with a merge or JSON patch (JSON text, a JSONPatch,
// or a value encoding/json marshals).
func Patch(target ObjectRef, t PatchType, patch any, pre Preconditions) error {
	text, err := Marshal(patch)
	if err != nil {
		return err
	}
	return refused(theHost().patch(target, t, text, pre))
}

// PatchMerge sends an RFC 7386 JSON merge patch.
func PatchMerge(target ObjectRef, patch any, pre Preconditions) error {
	return Patch(target, MergePatch, patch, pre)
}

// PatchJSON sends an RFC 6902 JSON patch built with JSONPatch.
func PatchJSON(target ObjectRef, patch JSONPatch, pre Preconditions) error {
	return Patch(target, JSONPatchType, patch, pre)
}

// AnnotationsPatch is the merge patch setting these annotations:
// `{"metadata":{"annotations":{k: v, ...}}}` (keys sorted when encoded).
func AnnotationsPatch(annotations map[string]string) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": annotations}}
}

// Annotate sets annotations on target with one merge patch
// (AnnotationsPatch).
func Annotate(target ObjectRef, annotations map[string]string, pre Preconditions) error {
	return PatchMerge(target, AnnotationsPatch(annotations), pre)
}

// AnnotateObject is Annotate on o itself (its kind, namespace and name),
// guarded by its uid.
func AnnotateObject(o *Object, annotations map[string]string) error {
	return Annotate(RefOf(o), annotations, UIDPrecondition(o.UID()))
}

// Delete deletes target; deleting one already gone is not an error.
func Delete(target ObjectRef, propagation Propagation, pre Preconditions) error {
	return refused(theHost().delete(target, propagation, pre))
}

// DeleteObject deletes o itself, guarded by its uid (a namesake created
// since is left alone).
func DeleteObject(o *Object, propagation Propagation) error {
	return Delete(RefOf(o), propagation, UIDPrecondition(o.UID()))
}

// EventRecord is an events.k8s.io/v1 Event. The host reports it as
// controller `kubewasm`, action `<plugin>`, instance
// `<host>/<plugin>@<version>`, and folds repeats of one (regarding, type,
// reason, note) into one Event with a series count.
type EventRecord struct {
	Regarding ObjectRef
	// RegardingUID is the regarding object's uid, when known ("" none).
	RegardingUID string
	Type         EventType
	// Reason is UpperCamelCase and short (`ReplicaCreated`).
	Reason string
	// Note is human-readable; at most 1 KiB is kept.
	Note string
}

// RecordEvent records an Event. Events need no Writes declaration, only
// the sidecar's `events` grant.
func RecordEvent(e EventRecord) error { return refused(theHost().recordEvent(e)) }

// RecordEventFor records an Event about regarding (no regarding uid).
func RecordEventFor(regarding ObjectRef, t EventType, reason, note string) error {
	return RecordEvent(EventRecord{Regarding: regarding, Type: t, Reason: reason, Note: note})
}

// RecordEventAbout records an Event about o (its kind, namespace, name and
// uid).
func RecordEventAbout(o *Object, t EventType, reason, note string) error {
	return RecordEvent(EventRecord{Regarding: RefOf(o), RegardingUID: o.UID(), Type: t, Reason: reason, Note: note})
}

// ---- finalizers ------------------------------------------------------------

// AddFinalizerPatch is the JSON patch adding finalizer to an object whose
// finalizers are current: `add /metadata/finalizers/-` (or `add
// /metadata/finalizers` with [finalizer] when there are none); false when
// it is already there. Send it with a resourceVersion precondition (as
// AddFinalizer does): a concurrent write then fails the patch as a
// conflict, which the next attempt's delta reports (a JSON patch `test`
// would fail as invalid, 422, instead).
func AddFinalizerPatch(current []string, finalizer string) (JSONPatch, bool) {
	if contains(current, finalizer) {
		return JSONPatch{}, false
	}
	if len(current) == 0 {
		return NewJSONPatch().Add("/metadata/finalizers", []string{finalizer}), true
	}
	return NewJSONPatch().Add("/metadata/finalizers/-", finalizer), true
}

// RemoveFinalizerPatch is the JSON patch removing finalizer from an object
// whose finalizers are current: one `remove /metadata/finalizers/<i>` per
// occurrence, highest index first; false when it is not there. Indexes are
// only safe with a resourceVersion precondition (as RemoveFinalizer sends
// it).
func RemoveFinalizerPatch(current []string, finalizer string) (JSONPatch, bool) {
	p := NewJSONPatch()
	for i := len(current) - 1; i >= 0; i-- {
		if current[i] == finalizer {
			p = p.Remove("/metadata/finalizers/" + strconv.Itoa(i))
		}
	}
	return p, !p.IsEmpty()
}

func finalizerPatch(o *Object, build func([]string, string) (JSONPatch, bool), finalizer string) (bool, error) {
	rv := o.ResourceVersion()
	p, ok := build(o.Finalizers(), finalizer)
	if !ok {
		return false, nil
	}
	pre := Preconditions{UID: o.UID(), ResourceVersion: rv}
	if err := PatchJSON(RefOf(o), p, pre); err != nil {
		return false, err
	}
	return true, nil
}

// AddFinalizer adds finalizer to o unless it is already there: one JSON
// patch (AddFinalizerPatch) with uid and resourceVersion preconditions, so
// a concurrent write fails it as a conflict instead of losing either
// change. It reports whether a patch was queued.
func AddFinalizer(o *Object, finalizer string) (bool, error) {
	return finalizerPatch(o, AddFinalizerPatch, finalizer)
}

// RemoveFinalizer removes finalizer from o if it is there: one JSON patch
// (RemoveFinalizerPatch: `remove` by index, which the resourceVersion
// precondition makes safe) with uid and resourceVersion preconditions. It
// reports whether a patch was queued.
func RemoveFinalizer(o *Object, finalizer string) (bool, error) {
	return finalizerPatch(o, RemoveFinalizerPatch, finalizer)
}
