package kubewasm

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ---- kinds -----------------------------------------------------------------

// GVK is a group/version/kind; the core group is "".
type GVK struct{ Group, Version, Kind string }

// GVKFromAPIVersion splits an apiVersion (`apps/v1`, `v1`) and pairs it
// with kind.
func GVKFromAPIVersion(apiVersion, kind string) GVK {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	return GVK{Group: group, Version: version, Kind: kind}
}

// APIVersion is `group/version`, or `version` for the core group.
func (g GVK) APIVersion() string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// Is reports whether g is k's group and kind (any version). A KindRef
// naming a resource (Resource set) never matches: only the host resolves
// resource names.
func (g GVK) Is(k KindRef) bool {
	return k.Resource == "" && g.Group == k.Group && g.Kind == k.GVK.Kind
}

// Ref is the KindRef naming g.
func (g GVK) Ref() KindRef { return KindRef{GVK: g} }

// KindRef names a kind by group/version/kind, or by kubectl resource name
// (`deployments.apps`, `widgets.v1.example.com`) when Resource is set; the
// host resolves resource names through discovery.
type KindRef struct {
	GVK
	Resource string
}

// Kind builds a KindRef from group ("" for core), version and kind.
func Kind(group, version, kind string) KindRef { return KindRef{GVK: GVK{group, version, kind}} }

// Resource builds a KindRef from a kubectl resource name (`deployments.apps`).
func Resource(name string) KindRef { return KindRef{Resource: name} }

// String is the resource name, or `group/version, Kind=kind`.
func (k KindRef) String() string {
	if k.Resource != "" {
		return k.Resource
	}
	return k.APIVersion() + ", Kind=" + k.GVK.Kind
}

// Common kinds (their preferred versions in Kubernetes 1.35).
var (
	ConfigMap     = Kind("", "v1", "ConfigMap")
	Namespace     = Kind("", "v1", "Namespace")
	Node          = Kind("", "v1", "Node")
	Pod           = Kind("", "v1", "Pod")
	Secret        = Kind("", "v1", "Secret")
	Service       = Kind("", "v1", "Service")
	ResourceQuota = Kind("", "v1", "ResourceQuota")
	Deployment    = Kind("apps", "v1", "Deployment")
	ReplicaSet    = Kind("apps", "v1", "ReplicaSet")
	StatefulSet   = Kind("apps", "v1", "StatefulSet")
	DaemonSet     = Kind("apps", "v1", "DaemonSet")
	NetworkPolicy = Kind("networking.k8s.io", "v1", "NetworkPolicy")
	// Event is events.k8s.io/v1 Event, the kind RecordEvent records
	// (recording needs no Writes declaration, only the sidecar's `events`
	// grant; reading Events back needs a subscription to Event).
	Event = Kind("events.k8s.io", "v1", "Event")
)

// ---- deltas ----------------------------------------------------------------

// DeltaType is what happened to an object (the WIT enum delta-type).
type DeltaType uint8

const (
	// Added: the object appeared (live, or as part of an initial list).
	Added DeltaType = iota
	// Updated: the object changed; the delta carries old and new states.
	Updated
	// Deleted: the object is gone; the delta carries its last known state.
	Deleted
	// Resync: a periodic resync replayed the cached object unchanged.
	Resync
	// Synced: the subscription's initial list is in the cache; no object.
	Synced
	// Requeue: the handler asked to see the object again (RequeueAfter);
	// the object is its current cached state.
	Requeue
)

// AllDeltaTypes is every delta type, Requeue included.
var AllDeltaTypes = []DeltaType{Added, Updated, Deleted, Resync, Synced, Requeue}

// SubscribableDeltaTypes is every delta type a subscription lists: all but
// Requeue, which comes whenever the handler asks for it.
var SubscribableDeltaTypes = []DeltaType{Added, Updated, Deleted, Resync, Synced}

// ObjectDeltaTypes (added, updated, deleted, resync) is what Subscribe
// delivers by default.
var ObjectDeltaTypes = []DeltaType{Added, Updated, Deleted, Resync}

// String is the WIT name: added, updated, deleted, resync, synced, requeue.
func (t DeltaType) String() string {
	if int(t) < len(deltaNames) {
		return deltaNames[t]
	}
	return "delta-type(" + strconv.Itoa(int(t)) + ")"
}

var deltaNames = [...]string{"added", "updated", "deleted", "resync", "synced", "requeue"}

// HasObject reports whether a delta of this type carries an object (all
// but Synced).
func (t DeltaType) HasObject() bool { return t != Synced }

// FailureKind says why the previous attempt at a delta failed.
type FailureKind uint8

const (
	// FailureRetry: the handler returned a Retry error.
	FailureRetry FailureKind = iota
	// FailureTrapped: the handler trapped, ran out of time or hit a limit.
	FailureTrapped
	// FailureConflict: an action was refused with a conflict (another field
	// manager, or a uid or resourceVersion precondition that did not hold):
	// re-read the cache and decide again.
	FailureConflict
	// FailureActionFailed: an action failed (the API server's answer, or a
	// timeout).
	FailureActionFailed
)

// String is the WIT name: retry, trapped, conflict, action-failed.
func (k FailureKind) String() string {
	switch k {
	case FailureRetry:
		return "retry"
	case FailureTrapped:
		return "trapped"
	case FailureConflict:
		return "conflict"
	case FailureActionFailed:
		return "action-failed"
	}
	return "failure(" + strconv.Itoa(int(k)) + ")"
}

// Failure is why the previous attempt at a delta failed (Delta.LastFailure).
type Failure struct {
	Kind    FailureKind
	Message string
}

// IsConflict reports whether an action hit a conflict.
func (f *Failure) IsConflict() bool { return f != nil && f.Kind == FailureConflict }

// String is `kind: message`.
func (f *Failure) String() string { return f.Kind.String() + ": " + f.Message }

// ---- metadata --------------------------------------------------------------

// Pair is one label or annotation.
type Pair struct{ Key, Value string }

func lookup(pairs []Pair, key string) (string, bool) {
	for _, p := range pairs {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// PairsOf turns a map into pairs sorted by key.
func PairsOf(m map[string]string) []Pair {
	out := make([]Pair, 0, len(m))
	for k, v := range m {
		out = append(out, Pair{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// OwnerReference is one entry of metadata.ownerReferences. Its JSON form
// is the API server's: controller and blockOwnerDeletion only when true.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         bool   `json:"controller,omitempty"`
	BlockOwnerDeletion bool   `json:"blockOwnerDeletion,omitempty"`
}

// ObjectMeta is an object's whole metadata record (Object.Meta). Namespace
// is "" for cluster-scoped objects.
type ObjectMeta struct {
	APIVersion, Kind, Namespace, Name, UID, ResourceVersion string
	Generation                                              *int64
	Labels, Annotations                                     []Pair
	OwnerReferences                                         []OwnerReference
	Finalizers                                              []string
	CreationTimestamp, DeletionTimestamp                    *string
}

// Label returns the value of label key and whether it is set.
func (m *ObjectMeta) Label(key string) (string, bool) { return lookup(m.Labels, key) }

// Annotation returns the value of annotation key and whether it is set.
func (m *ObjectMeta) Annotation(key string) (string, bool) { return lookup(m.Annotations, key) }

// ControllerOwner returns the owner reference marked controller, if any.
func (m *ObjectMeta) ControllerOwner() (OwnerReference, bool) {
	for _, o := range m.OwnerReferences {
		if o.Controller {
			return o, true
		}
	}
	return OwnerReference{}, false
}

// HasFinalizer reports whether finalizer is among the finalizers.
func (m *ObjectMeta) HasFinalizer(finalizer string) bool {
	return contains(m.Finalizers, finalizer)
}

// IsTerminating reports whether the object has a deletion timestamp.
func (m *ObjectMeta) IsTerminating() bool { return m.DeletionTimestamp != nil }

// GVK is the object's group/version/kind, from its apiVersion and kind.
func (m *ObjectMeta) GVK() GVK { return GVKFromAPIVersion(m.APIVersion, m.Kind) }

// Key is `namespace/name`, or `name` for cluster-scoped objects.
func (m *ObjectMeta) Key() string { return key(m.Namespace, m.Name) }

func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---- field values ----------------------------------------------------------

// FieldKind tells which member of a FieldValue is set.
type FieldKind uint8

const (
	FieldNull  FieldKind = iota // JSON null
	FieldBool                   // Bool
	FieldInt                    // Int (integers that fit an int64)
	FieldFloat                  // Float
	FieldText                   // Text (a JSON string)
	FieldJSON                   // Text holds an array or object as compact JSON
)

// FieldValue is the value found at a JSON pointer (Object.Field).
type FieldValue struct {
	Kind  FieldKind
	Bool  bool
	Int   int64
	Float float64
	Text  string
}

// AsString returns the text, if this is a string.
func (v FieldValue) AsString() (string, bool) { return v.Text, v.Kind == FieldText }

// AsInt returns the number, if this is an integer.
func (v FieldValue) AsInt() (int64, bool) { return v.Int, v.Kind == FieldInt }

// AsFloat returns the number, if this is an integer or a float.
func (v FieldValue) AsFloat() (float64, bool) {
	switch v.Kind {
	case FieldInt:
		return float64(v.Int), true
	case FieldFloat:
		return v.Float, true
	}
	return 0, false
}

// AsBool returns the value, if this is a boolean.
func (v FieldValue) AsBool() (bool, bool) { return v.Bool, v.Kind == FieldBool }

// RawJSON is the value as JSON text, never parsed: arrays and objects as
// the host sent them (embed them into what you apply as they are).
func (v FieldValue) RawJSON() json.RawMessage {
	switch v.Kind {
	case FieldBool:
		return json.RawMessage(strconv.FormatBool(v.Bool))
	case FieldInt:
		return json.RawMessage(strconv.FormatInt(v.Int, 10))
	case FieldFloat:
		if math.IsInf(v.Float, 0) || math.IsNaN(v.Float) {
			return json.RawMessage("null")
		}
		return json.RawMessage(strconv.FormatFloat(v.Float, 'g', -1, 64))
	case FieldText:
		b, _ := json.Marshal(v.Text)
		return b
	case FieldJSON:
		return json.RawMessage(v.Text)
	}
	return json.RawMessage("null")
}

// Decode decodes the value into out with encoding/json (arrays and objects
// cost a parse of that subtree only).
func (v FieldValue) Decode(out any) error { return json.Unmarshal(v.RawJSON(), out) }

// IsObject reports whether the value is a JSON object.
func (v FieldValue) IsObject() bool {
	return v.Kind == FieldJSON && strings.HasPrefix(v.Text, "{")
}

// ---- registration ----------------------------------------------------------

// Subscription is one stream of deltas. The zero values mean: all
// namespaces (Namespace ""), no label or field selector, no deltas at all
// (Deltas nil: the kind is only readable through the cache, see CacheOnly),
// every update delivered (Fields nil), and the host's default resync
// period (ResyncSeconds 0 and NoResync false). Build one with Subscribe,
// which delivers ObjectDeltaTypes.
type Subscription struct {
	Kind          KindRef
	Namespace     string
	LabelSelector string
	FieldSelector string
	// Which delta types to deliver; Requeue deltas come whenever the
	// handler asks for them, whatever this says.
	Deltas []DeltaType
	// JSON pointers of the fields that matter: an update changing none of
	// them (nor the labels, annotations or deletion timestamp) is skipped.
	Fields []string
	// Replay every cached object as a Resync delta this often; 0 is the
	// host's default (dispatch.defaultResync, 10 hours unless the operator
	// changes it).
	ResyncSeconds uint32
	// NoResync turns periodic resync off (resync-seconds: some(0)); it
	// wins over ResyncSeconds.
	NoResync bool
}

// Subscribe is a subscription to every object of kind, in all namespaces,
// delivering ObjectDeltaTypes (added, updated, deleted, resync), with no
// selectors, no fields filter and the host's default resync period.
func Subscribe(kind KindRef) Subscription {
	return Subscription{Kind: kind, Deltas: append([]DeltaType(nil), ObjectDeltaTypes...)}
}

// InNamespace: only objects in namespace.
func (s Subscription) InNamespace(namespace string) Subscription {
	s.Namespace = namespace
	return s
}

// WithLabels: only objects whose labels match selector (`app=web,tier!=db`,
// the API server's grammar, evaluated by the host).
func (s Subscription) WithLabels(selector string) Subscription {
	s.LabelSelector = selector
	return s
}

// WithFieldSelector: only objects matching a field selector
// (`spec.nodeName=node-1`; the fields the API server supports per kind).
func (s Subscription) WithFieldSelector(selector string) Subscription {
	s.FieldSelector = selector
	return s
}

// WithDeltas sets which delta types to deliver.
func (s Subscription) WithDeltas(deltas ...DeltaType) Subscription {
	s.Deltas = append([]DeltaType(nil), deltas...)
	return s
}

// WithFields sets the JSON pointers of the fields that matter.
func (s Subscription) WithFields(pointers ...string) Subscription {
	s.Fields = append([]string(nil), pointers...)
	return s
}

// CacheOnly: no deltas; the subscription only makes the kind readable
// through Get, List and ByIndex.
func (s Subscription) CacheOnly() Subscription {
	s.Deltas = nil
	return s
}

// ResyncEvery replays every cached object as a Resync delta every seconds
// (0 turns resync off, as WithoutResync).
func (s Subscription) ResyncEvery(seconds uint32) Subscription {
	s.ResyncSeconds, s.NoResync = seconds, seconds == 0
	return s
}

// WithoutResync turns periodic resync off.
func (s Subscription) WithoutResync() Subscription { return s.ResyncEvery(0) }

// resync is the WIT option<u32>: ok false for none.
func (s Subscription) resync() (seconds uint32, ok bool) {
	switch {
	case s.NoResync:
		return 0, true
	case s.ResyncSeconds > 0:
		return s.ResyncSeconds, true
	}
	return 0, false
}

// Index is a secondary index over the cache, read with ByIndex: the values
// at Pointer are the keys (a `*` segment iterates an array:
// `/metadata/ownerReferences/*/uid`).
type Index struct {
	Name    string
	Kind    KindRef
	Pointer string
}

// Registration is what a plugin answers at register: its subscriptions
// (deltas name them by position, Delta.Subscription), the kinds it may
// apply, patch or delete (Events need no declaration) and its indexes.
type Registration struct {
	Subscriptions []Subscription
	Writes        []KindRef
	Indexes       []Index
}

// Subscribe adds subscriptions, in order.
func (r Registration) Subscribe(s ...Subscription) Registration {
	r.Subscriptions = append(append([]Subscription(nil), r.Subscriptions...), s...)
	return r
}

// Write declares kinds the plugin writes.
func (r Registration) Write(kinds ...KindRef) Registration {
	r.Writes = append(append([]KindRef(nil), r.Writes...), kinds...)
	return r
}

// AddIndex declares secondary indexes.
func (r Registration) AddIndex(indexes ...Index) Registration {
	r.Indexes = append(append([]Index(nil), r.Indexes...), indexes...)
	return r
}
