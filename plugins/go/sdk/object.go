package kubewasm

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ---- objects ---------------------------------------------------------------

// Object is a read-only view of one object held by the host (a delta's
// object or a cached one). Every method is one host call that copies only
// what it returns; nothing is parsed in the guest unless asked (Decode).
//
// An Object is valid during the Handle call that received it: the SDK drops
// its handle when Handle returns. Using it afterwards (or after Release)
// panics, which Handle turns into a permanent error.
type Object struct {
	handle uint32
	live   bool
}

// Handles the guest owns during one export call, dropped at its end.
var owned []*Object

func own(h uint32) *Object {
	o := &Object{handle: h, live: true}
	owned = append(owned, o)
	return o
}

func dropOwned() {
	for _, o := range owned {
		o.Release()
	}
	clear(owned)
	owned = owned[:0]
}

// Release drops the object's handle now instead of when Handle returns
// (handles count against the sidecar's limits.handles). Releasing twice is
// a no-op; any other use afterwards panics.
func (o *Object) Release() {
	if o != nil && o.live {
		o.live = false
		theHost().objectDrop(o.handle)
	}
}

func (o *Object) h() uint32 {
	if o == nil {
		panic("kubewasm: nil *Object")
	}
	if !o.live {
		panic("kubewasm: object used after Release or after the Handle call that received it returned")
	}
	return o.handle
}

// Kind is the object's group, version and kind.
func (o *Object) Kind() GVK { return theHost().objectKind(o.h()) }

// Namespace is the object's namespace, "" for cluster-scoped objects.
func (o *Object) Namespace() string { return theHost().objectNamespace(o.h()) }

// Name is metadata.name.
func (o *Object) Name() string { return theHost().objectName(o.h()) }

// UID is metadata.uid.
func (o *Object) UID() string { return theHost().objectUID(o.h()) }

// ResourceVersion is metadata.resourceVersion.
func (o *Object) ResourceVersion() string { return theHost().objectResourceVersion(o.h()) }

// Generation is metadata.generation, if set.
func (o *Object) Generation() (int64, bool) { return theHost().objectGeneration(o.h()) }

// Label returns one label's value and whether it is set.
func (o *Object) Label(key string) (string, bool) { return theHost().objectLabel(o.h(), key) }

// Labels is every label, sorted by key.
func (o *Object) Labels() []Pair { return theHost().objectLabels(o.h()) }

// Annotation returns one annotation's value and whether it is set.
func (o *Object) Annotation(key string) (string, bool) {
	return theHost().objectAnnotation(o.h(), key)
}

// Annotations is every annotation, sorted by key.
func (o *Object) Annotations() []Pair { return theHost().objectAnnotations(o.h()) }

// OwnerReferences is metadata.ownerReferences, in order.
func (o *Object) OwnerReferences() []OwnerReference {
	return theHost().objectOwnerReferences(o.h())
}

// Controller returns the owner reference marked controller, if any.
func (o *Object) Controller() (OwnerReference, bool) { return theHost().objectController(o.h()) }

// Finalizers is metadata.finalizers.
func (o *Object) Finalizers() []string { return theHost().objectFinalizers(o.h()) }

// DeletionTimestamp is metadata.deletionTimestamp (RFC 3339), set while the
// object is being finalized.
func (o *Object) DeletionTimestamp() (string, bool) {
	return theHost().objectDeletionTimestamp(o.h())
}

// Meta is the whole metadata record in one call (copies every label,
// annotation, owner and finalizer).
func (o *Object) Meta() ObjectMeta { return theHost().objectMeta(o.h()) }

// Field returns the value at an RFC 6901 JSON pointer (`/spec/nodeName`,
// `/status/containerStatuses/0/restartCount`) and whether it exists.
// Arrays and objects come back as compact JSON (FieldJSON).
func (o *Object) Field(pointer string) (FieldValue, bool) {
	return theHost().objectField(o.h(), pointer)
}

// Fields reads several pointers in one call, in order; nil for a pointer
// that does not exist.
func (o *Object) Fields(pointers ...string) []*FieldValue {
	return theHost().objectFields(o.h(), pointers)
}

// FieldString returns the string at pointer; false when absent or not a
// string.
func (o *Object) FieldString(pointer string) (string, bool) {
	v, ok := o.Field(pointer)
	if !ok {
		return "", false
	}
	return v.AsString()
}

// FieldInt returns the integer at pointer; false when absent or not an
// integer.
func (o *Object) FieldInt(pointer string) (int64, bool) {
	v, ok := o.Field(pointer)
	if !ok {
		return 0, false
	}
	return v.AsInt()
}

// FieldBool returns the boolean at pointer; false when absent or not a
// boolean.
func (o *Object) FieldBool(pointer string) (value, ok bool) {
	v, ok := o.Field(pointer)
	if !ok {
		return false, false
	}
	return v.AsBool()
}

// FieldDecode decodes the value at pointer into out (encoding/json);
// found is false when the pointer does not exist. A mismatch is a
// permanent error.
func (o *Object) FieldDecode(pointer string, out any) (found bool, err error) {
	v, ok := o.Field(pointer)
	if !ok {
		return false, nil
	}
	if err := v.Decode(out); err != nil {
		return true, Permanentf("field %s of %s: %v", pointer, o.Key(), err)
	}
	return true, nil
}

// ToJSON is the whole object as compact JSON (managedFields and the
// last-applied annotation stripped unless the host keeps them).
func (o *Object) ToJSON() string { return theHost().objectToJSON(o.h()) }

// Decode decodes the whole object into out (encoding/json; costs a full
// parse). A mismatch is a permanent error.
func (o *Object) Decode(out any) error {
	if err := json.Unmarshal([]byte(o.ToJSON()), out); err != nil {
		return Permanentf("cannot decode object: %v", err)
	}
	return nil
}

// Is reports whether the object is of k's group and kind (any version).
func (o *Object) Is(k KindRef) bool { return o.Kind().Is(k) }

// Key is `namespace/name`, or `name` for cluster-scoped objects (two host
// calls).
func (o *Object) Key() string { return key(o.Namespace(), o.Name()) }

// IsTerminating reports whether the object has a deletion timestamp.
func (o *Object) IsTerminating() bool {
	_, ok := o.DeletionTimestamp()
	return ok
}

// HasFinalizer reports whether finalizer is among the object's finalizers.
func (o *Object) HasFinalizer(finalizer string) bool { return contains(o.Finalizers(), finalizer) }

// ---- deltas ----------------------------------------------------------------

// Delta is one event delivered to Handle.
type Delta struct {
	Type DeltaType
	// Subscription is the index, in Registration.Subscriptions, of the
	// subscription this delta is for (free to read, unlike Kind).
	Subscription uint32
	// Namespace is "" for cluster-scoped objects and for Synced.
	Namespace string
	// Name, UID and ResourceVersion (the new state's, for updates) are ""
	// for Synced.
	Name, UID, ResourceVersion string
	// Object is the new state for updates, the last known state for
	// deletes; nil only for Synced.
	Object *Object
	// OldObject is the previous state, for Updated only.
	OldObject *Object
	// Initial is true for Added deltas of an initial list or of the replay
	// a newly loaded plugin version receives.
	Initial bool
	// FinalStateUnknown is true for a Deleted delta found by a relist: the
	// object is its last known state.
	FinalStateUnknown bool
	// Attempt is 1 the first time this delta is handled, 2 on its first
	// retry...
	Attempt uint32
	// LastFailure is why the previous attempt failed; nil on the first.
	LastFailure *Failure
}

// RequireObject returns the delta's object, or a permanent error for a
// delta that carries none (Synced).
func (d *Delta) RequireObject() (*Object, error) {
	if d.Object == nil {
		if k := d.Key(); k != "" {
			return nil, Permanentf("%s delta for %s carries no object", d.Type, k)
		}
		return nil, Permanentf("%s delta carries no object", d.Type)
	}
	return d.Object, nil
}

// Key is `namespace/name` from the delta's scalars (no host call); `name`
// for cluster-scoped objects, "" for Synced.
func (d *Delta) Key() string { return key(d.Namespace, d.Name) }

// Kind is the object's group/version/kind (one host call); false for
// Synced. To tell subscriptions apart for free, switch on Subscription.
func (d *Delta) Kind() (GVK, bool) {
	if d.Object == nil {
		return GVK{}, false
	}
	return d.Object.Kind(), true
}

// Is reports whether the delta's object is of k's group and kind (one host
// call; false for Synced).
func (d *Delta) Is(k KindRef) bool { return d.Object != nil && d.Object.Is(k) }

// OldMeta is the previous state's whole metadata (Updated only; one host
// call), nil otherwise.
func (d *Delta) OldMeta() *ObjectMeta {
	if d.OldObject == nil {
		return nil
	}
	m := d.OldObject.Meta()
	return &m
}

// Retried reports whether this delta was handled before and failed
// (Attempt > 1; LastFailure says why).
func (d *Delta) Retried() bool { return d.Attempt > 1 }

// Ref is a reference of kind kind to the delta's object, from its scalars
// (no host call).
func (d *Delta) Ref(kind KindRef) ObjectRef {
	return ObjectRef{Kind: kind, Namespace: d.Namespace, Name: d.Name}
}

// Preconditions are the delta object's uid and resourceVersion, from its
// scalars (no host call): a write guarded by them happens only if nobody
// changed the object since.
func (d *Delta) Preconditions() Preconditions {
	return Preconditions{UID: d.UID, ResourceVersion: d.ResourceVersion}
}

// ---- label selectors -------------------------------------------------------

// LabelSelector is a label selector parsed by the host with the API
// server's grammar (`app=web,tier!=db,env in (a,b),!legacy,release notin
// (canary)`); the empty selector matches everything. It is a host resource:
// it lives until Close, across Handle calls (parse the config's selectors
// in the constructor and keep them), and counts against the sidecar's
// limits.handles.
type LabelSelector struct {
	handle uint32
	live   bool
}

// ParseSelector parses text on the host; the error is the host's message,
// naming the offending part.
func ParseSelector(text string) (*LabelSelector, error) {
	h, err := theHost().selectorParse(text)
	if err != nil {
		return nil, err
	}
	return &LabelSelector{handle: h, live: true}, nil
}

func (s *LabelSelector) h() uint32 {
	if s == nil {
		panic("kubewasm: nil *LabelSelector")
	}
	if !s.live {
		panic("kubewasm: label selector used after Close")
	}
	return s.handle
}

// Close drops the selector's host handle. Closing twice (or a nil
// selector) is a no-op.
func (s *LabelSelector) Close() {
	if s != nil && s.live {
		s.live = false
		theHost().selectorDrop(s.handle)
	}
}

// Matches reports whether a label set matches (the labels are copied to the
// host; for an object, MatchesObject copies nothing).
func (s *LabelSelector) Matches(labels []Pair) bool {
	return theHost().selectorMatches(s.h(), labels)
}

// MatchesMap is Matches for labels given as a map.
func (s *LabelSelector) MatchesMap(labels map[string]string) bool {
	return s.Matches(PairsOf(labels))
}

// MatchesObject reports whether an object's labels match (read on the
// host, not copied).
func (s *LabelSelector) MatchesObject(o *Object) bool {
	return theHost().selectorMatchesObject(s.h(), o.h())
}

// String is the canonical text: requirements sorted by key, as the API
// server prints them ("" for the empty selector).
func (s *LabelSelector) String() string { return theHost().selectorString(s.h()) }

// IsEverything reports whether this is the empty selector, which matches
// everything.
func (s *LabelSelector) IsEverything() bool { return s.String() == "" }

// ---- cache -----------------------------------------------------------------

// CacheErrorKind says why the host refused a cache read.
type CacheErrorKind uint8

const (
	// NotSubscribed: the kind is not among the plugin's subscriptions.
	NotSubscribed CacheErrorKind = iota
	// UnknownIndex: no index of that name was declared.
	UnknownIndex
	// InvalidSelector: the label selector does not parse.
	InvalidSelector
	// ReadForbidden: the sidecar's access list does not grant the read.
	ReadForbidden
)

// CacheError is a cache read the host refused; the permanent errors Get,
// List and ByIndex return wrap it (errors.As).
type CacheError struct {
	Kind    CacheErrorKind
	Message string
}

// Error is the message a refused read reports: `cache read refused, <why>: <host message>`.
func (e *CacheError) Error() string {
	switch e.Kind {
	case NotSubscribed:
		return "cache read refused, not subscribed: " + e.Message
	case UnknownIndex:
		return "cache read refused, unknown index: " + e.Message
	case InvalidSelector:
		return "cache read refused, invalid selector: " + e.Message
	case ReadForbidden:
		return "cache read refused, not granted: " + e.Message
	}
	return fmt.Sprintf("cache read refused (%d): %s", e.Kind, e.Message)
}

// refused turns a host refusal into a permanent error wrapping it.
func refused(err error) error {
	if err == nil {
		return nil
	}
	var h *HandlerError
	if errors.As(err, &h) {
		return err
	}
	return &HandlerError{Msg: err.Error(), cause: err}
}

func owns(handles []uint32) []*Object {
	out := make([]*Object, len(handles))
	for i, h := range handles {
		out[i] = own(h)
	}
	return out
}

// Get returns one object of kind by namespace ("" for cluster-scoped) and
// name from the host's cache, or nil when it is not there. Never an API
// call; the kind must be subscribed (CacheOnly suffices).
func Get(kind KindRef, namespace, name string) (*Object, error) {
	h, found, err := theHost().cacheGet(kind, namespace, name)
	if err != nil {
		return nil, refused(err)
	}
	if !found {
		return nil, nil
	}
	return own(h), nil
}

// List returns the cached objects of kind in one namespace (or all: ""),
// filtered by a label selector (none: ""), sorted by namespace then name.
func List(kind KindRef, namespace, labelSelector string) ([]*Object, error) {
	hs, err := theHost().cacheList(kind, namespace, labelSelector)
	if err != nil {
		return nil, refused(err)
	}
	return owns(hs), nil
}

// ListSelected is List filtered by a parsed selector (its canonical text is
// sent to the host; nil is no filter).
func ListSelected(kind KindRef, namespace string, selector *LabelSelector) ([]*Object, error) {
	text := ""
	if selector != nil {
		text = selector.String()
	}
	return List(kind, namespace, text)
}

// ByIndex returns the objects whose declared index yields value (the pods
// of one owner uid, of one node...), sorted by namespace then name.
func ByIndex(index, value string) ([]*Object, error) {
	hs, err := theHost().cacheByIndex(index, value)
	if err != nil {
		return nil, refused(err)
	}
	return owns(hs), nil
}
