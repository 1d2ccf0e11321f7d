//go:build wasip1

// Package kubewasm is the SDK for kubewasm plugins written in Go
// (GOOS=wasip1, wrapped into a component with the WASI preview1 reactor
// adapter; see plugins/build-languages.sh).
//
// A plugin calls Export from an init function with a constructor that
// parses the config; the returned Plugin answers Registration and handles
// deltas. Cache reads and actions turn refusals into permanent errors.
//
//	func init() { kubewasm.Export(func(config string) (kubewasm.Plugin, error) { ... }) }
//	func main() {}
package kubewasm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// ---- types -----------------------------------------------------------------

// GVK is a group/version/kind; the core group is "".
type GVK struct{ Group, Version, Kind string }

// KindRef names a kind by group/version/kind, or by kubectl resource name
// when Resource is set.
type KindRef struct {
	GVK
	Resource string
}

// Kind builds a KindRef from group, version and kind.
func Kind(group, version, kind string) KindRef { return KindRef{GVK: GVK{group, version, kind}} }

// Resource builds a KindRef from a resource name (`deployments.apps`).
func Resource(name string) KindRef { return KindRef{Resource: name} }

// Common kinds.
var (
	ConfigMap  = Kind("", "v1", "ConfigMap")
	Namespace  = Kind("", "v1", "Namespace")
	Node       = Kind("", "v1", "Node")
	Pod        = Kind("", "v1", "Pod")
	Secret     = Kind("", "v1", "Secret")
	Deployment = Kind("apps", "v1", "Deployment")
	ReplicaSet = Kind("apps", "v1", "ReplicaSet")
)

// DeltaType is what happened to an object.
type DeltaType uint8

const (
	Added DeltaType = iota
	Updated
	Deleted
	Resync
	Synced
)

func (t DeltaType) String() string {
	return [...]string{"added", "updated", "deleted", "resync", "synced"}[t]
}

// OwnerReference is one entry of metadata.ownerReferences.
type OwnerReference struct {
	APIVersion, Kind, Name, UID string
	Controller                  bool
}

// ObjectMeta is the metadata the host decodes for every object. Namespace
// is "" for cluster-scoped objects.
type ObjectMeta struct {
	APIVersion, Kind, Namespace, Name, UID, ResourceVersion string
	Generation                                              *int64
	Labels, Annotations                                     []Pair
	OwnerReferences                                         []OwnerReference
	CreationTimestamp, DeletionTimestamp                    *string
}

// Label returns the value of label key and whether it is set.
func (m *ObjectMeta) Label(key string) (string, bool) { return lookup(m.Labels, key) }

// Annotation returns the value of annotation key and whether it is set.
func (m *ObjectMeta) Annotation(key string) (string, bool) { return lookup(m.Annotations, key) }

// IsTerminating reports whether the object has a deletion timestamp.
func (m *ObjectMeta) IsTerminating() bool { return m.DeletionTimestamp != nil }

// Key is `namespace/name`, or `name` for cluster-scoped objects.
func (m *ObjectMeta) Key() string {
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

// Object is a read-only view of an object held by the host; valid during
// the handle call that received it.
type Object struct{ handle uint32 }

// Meta returns the object's metadata.
func (o *Object) Meta() ObjectMeta {
	r := ret()
	objectMeta(o.handle, r)
	return loadMeta(r)
}

// FieldKind tells which member of a FieldValue is set.
type FieldKind uint8

const (
	FieldNull FieldKind = iota
	FieldBool
	FieldInt
	FieldFloat
	FieldText
	FieldJSON // arrays and objects, as compact JSON in Text
)

// FieldValue is the value found at a JSON pointer.
type FieldValue struct {
	Kind  FieldKind
	Bool  bool
	Int   int64
	Float float64
	Text  string
}

// Field returns the value at an RFC 6901 pointer; ok is false when absent.
func (o *Object) Field(pointer string) (v FieldValue, ok bool) {
	p, n := argString(pointer)
	r := ret()
	objectField(o.handle, p, n, r)
	if load8(r) == 0 {
		return v, false
	}
	v.Kind = FieldKind(load8(r + 8))
	switch v.Kind {
	case FieldBool:
		v.Bool = load8(r+16) != 0
	case FieldInt:
		v.Int = int64(load64(r + 16))
	case FieldFloat:
		bits := load64(r + 16)
		v.Float = *(*float64)(unsafe.Pointer(&bits))
	case FieldText, FieldJSON:
		v.Text = loadString(r + 16)
	}
	return v, true
}

// FieldString returns the string at pointer, if it is one.
func (o *Object) FieldString(pointer string) (string, bool) {
	v, ok := o.Field(pointer)
	if !ok || v.Kind != FieldText {
		return "", false
	}
	return v.Text, true
}

// ToJSON returns the whole object as compact JSON.
func (o *Object) ToJSON() string {
	r := ret()
	objectToJSON(o.handle, r)
	return loadString(r)
}

// Delta is one event delivered to Handle.
type Delta struct {
	Type              DeltaType
	Subscription      uint32
	Kind              GVK
	Meta              *ObjectMeta
	Object, OldObject *Object
	Initial           bool
	FinalStateUnknown bool
}

// Parts returns the metadata and object of a delta that must carry one,
// or a permanent error.
func (d *Delta) Parts() (*ObjectMeta, *Object, error) {
	if d.Meta == nil || d.Object == nil {
		return nil, nil, Permanent(fmt.Sprintf("%s delta for %s carries no object", d.Type, d.Kind.Kind))
	}
	return d.Meta, d.Object, nil
}

// Is reports whether the delta's object is of k's group and kind.
func (d *Delta) Is(k KindRef) bool { return d.Kind.Group == k.Group && d.Kind.Kind == k.GVK.Kind }

// OldMeta returns the previous state's metadata (updated deltas only).
func (d *Delta) OldMeta() *ObjectMeta {
	if d.OldObject == nil {
		return nil
	}
	m := d.OldObject.Meta()
	return &m
}

// ---- registration ----------------------------------------------------------

// Subscription is one stream of deltas; empty strings mean none/all.
type Subscription struct {
	Kind                         KindRef
	Namespace                    string
	LabelSelector, FieldSelector string
	Deltas                       []DeltaType
	Fields                       []string
	ResyncSeconds                uint32
}

// Index is a secondary index over the cache.
type Index struct {
	Name    string
	Kind    KindRef
	Pointer string
}

// Registration is what Register answers.
type Registration struct {
	Subscriptions []Subscription
	Writes        []KindRef
	Indexes       []Index
}

// ---- errors ----------------------------------------------------------------

// HandlerError is returned by Handle: Retry ones are retried with backoff.
type HandlerError struct {
	Retry bool
	Msg   string
}

func (e *HandlerError) Error() string { return e.Msg }

// Permanent is an error retrying will not fix.
func Permanent(msg string) error { return &HandlerError{Msg: msg} }

// Retry is a transient error.
func Retry(msg string) error { return &HandlerError{Retry: true, Msg: msg} }

// IsRetry reports whether err asks for a retry.
func IsRetry(err error) bool {
	var h *HandlerError
	return errors.As(err, &h) && h.Retry
}

// ---- config ----------------------------------------------------------------

// ParseConfig decodes the config JSON into v (a pointer to a struct with
// json tags and its defaults already set): empty or null keeps the
// defaults, unknown keys are errors.
func ParseConfig(config string, v any) error {
	t := strings.TrimSpace(config)
	if t == "" || t == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	return nil
}

// ---- cache -----------------------------------------------------------------

// Get returns one object ("" namespace for cluster-scoped), or nil.
func Get(kind KindRef, namespace, name string) (*Object, error) {
	k0, k1, k2, k3, k4, k5, k6 := argKind(kind)
	n0, n1, n2 := argOptString(namespace)
	m0, m1 := argString(name)
	r := ret()
	cacheGet(k0, k1, k2, k3, k4, k5, k6, n0, n1, n2, m0, m1, r)
	if load8(r) != 0 {
		return nil, cacheError(r + 4)
	}
	if load8(r+4) == 0 {
		return nil, nil
	}
	return own(load32(r + 8)), nil
}

// List returns the objects of a kind in one namespace (or all: ""),
// filtered by a label selector (none: ""), sorted by namespace and name.
func List(kind KindRef, namespace, labelSelector string) ([]*Object, error) {
	k0, k1, k2, k3, k4, k5, k6 := argKind(kind)
	n0, n1, n2 := argOptString(namespace)
	s0, s1, s2 := argOptString(labelSelector)
	cacheList(k0, k1, k2, k3, k4, k5, k6, n0, n1, n2, s0, s1, s2, ret())
	return cacheObjects()
}

// ByIndex returns the objects whose declared index yields value.
func ByIndex(index, value string) ([]*Object, error) {
	i0, i1 := argString(index)
	v0, v1 := argString(value)
	cacheByIndex(i0, i1, v0, v1, ret())
	return cacheObjects()
}

// ---- actions ---------------------------------------------------------------

// ObjectRef names the target of an action; "" namespace or uid is none.
type ObjectRef struct {
	Kind                 KindRef
	Namespace, Name, UID string
}

// RefTo is a reference to the object meta describes, with its uid.
func RefTo(kind KindRef, meta *ObjectMeta) ObjectRef {
	return ObjectRef{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, UID: meta.UID}
}

// Propagation is a delete propagation policy.
type Propagation uint32

const (
	Background Propagation = iota
	Foreground
	Orphan
)

// PatchType is merge (RFC 7386) or json (RFC 6902).
type PatchType uint32

const (
	MergePatch PatchType = iota
	JSONPatch
)

// EventType is Normal or Warning.
type EventType uint32

const (
	Normal EventType = iota
	Warning
)

func marshal(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", Permanent("cannot encode action: " + err.Error())
	}
	return string(b), nil
}

// Apply server-side applies an object (a JSON string, or a value that
// encoding/json marshals, with apiVersion, kind and metadata).
func Apply(object any, force bool) error {
	text, err := marshal(object)
	if err != nil {
		return err
	}
	p, n := argString(text)
	f := uint32(0)
	if force {
		f = 1
	}
	actionApply(p, n, f, ret())
	return actionResult()
}

// ApplyStatus server-side applies to the status subresource.
func ApplyStatus(object any) error {
	text, err := marshal(object)
	if err != nil {
		return err
	}
	p, n := argString(text)
	actionApplyStatus(p, n, ret())
	return actionResult()
}

// Patch patches an object with a merge or JSON patch.
func Patch(target ObjectRef, t PatchType, patch any) error {
	text, err := marshal(patch)
	if err != nil {
		return err
	}
	params := alloc(72, 4)
	putRef(params, target)
	store8(params+60, uint8(t))
	putString(params+64, text)
	actionPatch(params, ret())
	return actionResult()
}

// Delete deletes an object; one already gone is not an error.
func Delete(target ObjectRef, propagation Propagation) error {
	k, ns, name, uid := argRef(target)
	actionDelete(k[0], k[1], k[2], k[3], k[4], k[5], k[6], ns[0], ns[1], ns[2], name[0], name[1],
		uid[0], uid[1], uid[2], uint32(propagation), ret())
	return actionResult()
}

// RecordEvent records an Event about regarding.
func RecordEvent(regarding ObjectRef, t EventType, reason, note string) error {
	params := alloc(80, 4)
	putRef(params, regarding)
	store8(params+60, uint8(t))
	putString(params+64, reason)
	putString(params+72, note)
	actionEvent(params, ret())
	return actionResult()
}

// ---- log and clock ---------------------------------------------------------

// Level is a log level.
type Level uint32

const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log writes a record with fields given as key, value, key, value...
func Log(level Level, msg string, kv ...string) {
	if logEnabled(uint32(level)) == 0 {
		return
	}
	fields := alloc(uint32(8*len(kv)), 4)
	for i, s := range kv {
		putString(fields+uint32(8*i), s)
	}
	m0, m1 := argString(msg)
	logWrite(uint32(level), m0, m1, fields, uint32(len(kv)/2))
}

func Debug(msg string, kv ...string) { Log(LevelDebug, msg, kv...) }
func Info(msg string, kv ...string)  { Log(LevelInfo, msg, kv...) }
func Warn(msg string, kv ...string)  { Log(LevelWarn, msg, kv...) }
func Error(msg string, kv ...string) { Log(LevelError, msg, kv...) }

// NowRFC3339 is the host's wall clock as RFC 3339 (seconds precision).
func NowRFC3339() string {
	clockNowRFC3339(ret())
	return loadString(ret())
}

// NowUnix is the host's wall clock as seconds and nanoseconds.
func NowUnix() (int64, uint32) {
	clockNow(ret())
	return int64(load64(ret())), load32(ret() + 8)
}

// ---- the export ------------------------------------------------------------

// Plugin is a loaded plugin version.
type Plugin interface {
	Registration() Registration
	Handle(d *Delta) error
}

var (
	factory func(config string) (Plugin, error)
	plugin  Plugin
)

// Export sets the constructor called by register with the config JSON.
func Export(newPlugin func(config string) (Plugin, error)) { factory = newPlugin }

func register(config string) (Registration, error) {
	if factory == nil {
		return Registration{}, errors.New("no plugin exported: call kubewasm.Export from init")
	}
	p, err := factory(config)
	if err != nil {
		return Registration{}, err
	}
	plugin = p
	return p.Registration(), nil
}

func handle(d *Delta) (err error) {
	if plugin == nil {
		return Permanent("handle called before register")
	}
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Sprint("panic: ", r))
		}
	}()
	return plugin.Handle(d)
}
