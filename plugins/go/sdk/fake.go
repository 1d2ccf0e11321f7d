//go:build !wasip1

package kubewasm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FakeHost is a fake kubewasm host for unit tests with `go test`, natively:
// no WebAssembly, no kubewasm binary, no cluster. Outside GOOS=wasip1 the
// SDK sends every host call (cache reads, actions, label selectors, log,
// clock, the methods of Object) to the installed FakeHost: a test puts
// objects into its cache, loads the plugin its init exported, hands it
// deltas, then asserts the actions it emitted (in order) and what it
// logged.
//
//	func TestAnnotates(t *testing.T) {
//		f := kw.NewFakeHost(t)
//		if err := f.Load("hello", "{}"); err != nil {
//			t.Fatal(err)
//		}
//		d := f.Added(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"greeting","namespace":"demo"}}`)
//		if _, err := f.Handle(d); err != nil {
//			t.Fatal(err)
//		}
//		got := f.TakeActionLines() // ["patch ConfigMap demo/greeting merge {...} uid=uid-demo-greeting"]
//	}
//
// What it does as the host does: objects are snapshots behind handles
// (dropped when Handle returns); List sorts by namespace then name and
// filters with a port of the host's label-selector parser (checked against
// the same apimachinery golden cases); ToJSON strips managedFields and the
// last-applied annotation; field values are typed as the host types them.
// After Load the registration is enforced: reading a kind not subscribed
// to is a NotSubscribed refusal, writing one not declared NotDeclared,
// ByIndex answers declared indexes only. Actions must be well formed
// (Invalid), and Handle drops the actions of a call that returns an error.
// Not faked: the sidecar's access list, executing actions (the cache
// changes only when the test changes it), retries, time passing.
//
// The SDK's host is one package variable: tests that use a FakeHost must
// not run in parallel (no t.Parallel).
type FakeHost struct {
	cache     map[fakeKey]map[string]any
	handles   map[uint32]map[string]any
	selectors map[uint32]*fakeSelector
	next      uint32
	actions   []FakeAction
	logs      []FakeLog
	clock     time.Time
	logLevel  Level
	reg       *Registration
}

// FakeNow is where a FakeHost's clock starts: 2026-01-01T00:00:00Z.
var FakeNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeKey is a cached object's identity; namespace "" when cluster-scoped.
type fakeKey struct{ group, kind, namespace, name string }

// FakeAction is one action a plugin emitted, as the host would queue it.
type FakeAction struct {
	// Verb is apply, apply-status, patch, delete or event.
	Verb string
	// Object is the applied object (apply, apply-status), decoded.
	Object map[string]any
	// Force is apply's force.
	Force bool
	// Target is what a patch or delete targets (for an event, Event.Regarding).
	Target ObjectRef
	// PatchType and Patch (compact JSON) are a patch's.
	PatchType PatchType
	Patch     string
	// Propagation is a delete's.
	Propagation Propagation
	// Event is an event's record.
	Event EventRecord
	// Preconditions are checked by the server before the write.
	Preconditions Preconditions
}

// FakeLog is one record a plugin logged.
type FakeLog struct {
	Level   Level
	Message string
	Fields  []Pair
}

// NewFakeHost installs an empty fake host (no objects, no registration,
// every log level enabled, the clock at FakeNow) until the test ends
// (t.Cleanup; pass a *testing.T).
func NewFakeHost(t interface{ Cleanup(func()) }) *FakeHost {
	f := &FakeHost{
		cache:     map[fakeKey]map[string]any{},
		handles:   map[uint32]map[string]any{},
		selectors: map[uint32]*fakeSelector{},
		next:      1,
		clock:     FakeNow,
	}
	host = f
	t.Cleanup(func() {
		dropOwned()
		if host == hostAPI(f) {
			host = nil
		}
		plugin = nil
	})
	return f
}

// ---- the plugin ----

// Load builds the plugin as the host does: the constructor given to Export
// (from the package's init) with a Context named name (version
// 000000000000) and config (JSON; "" or "{}" for none), then Registration,
// which the fake keeps and enforces from then on.
func (f *FakeHost) Load(name, config string) error {
	reg, err := register(Context{Name: name, Version: "000000000000", Config: config})
	if err != nil {
		return err
	}
	f.reg = &reg
	return nil
}

// Registration is the registration of the plugin loaded last (nil before).
func (f *FakeHost) Registration() *Registration { return f.reg }

// Handle hands d to the loaded plugin as the host does: the delta's handles
// (and those the call took) are dropped when it returns, a panic is a
// permanent error, and the actions of a call that returns an error are
// dropped.
func (f *FakeHost) Handle(d *Delta) (Handled, error) {
	mark := len(f.actions)
	h, err := handle(d)
	if err != nil {
		f.actions = f.actions[:mark]
	}
	return h, err
}

// ---- the cache ----

// Put puts an object into the cache, replacing one of the same kind,
// namespace and name. The object is JSON (a string, []byte or
// json.RawMessage) or any value encoding/json encodes to an object with
// apiVersion, kind, metadata.name and, if namespaced, metadata.namespace.
// Put fills in what the API server would: metadata.uid
// (`uid-NAMESPACE-NAME`, or the replaced object's), resourceVersion (the
// replaced object's plus one, or "1") and creationTimestamp (the clock).
// It panics on an object it cannot read.
func (f *FakeHost) Put(object any) *FakeHost {
	f.store(object)
	return f
}

// Remove removes the object (matched by group, kind, namespace and name)
// from the cache; it reports whether it was there.
func (f *FakeHost) Remove(object any) bool {
	k := fakeKeyOf(fakeDecode(object))
	_, ok := f.cache[k]
	delete(f.cache, k)
	return ok
}

// Objects is every cached object, by group, kind, namespace and name.
func (f *FakeHost) Objects() []map[string]any {
	keys := f.sortedKeys()
	out := make([]map[string]any, len(keys))
	for i, k := range keys {
		out[i] = f.cache[k]
	}
	return out
}

func (f *FakeHost) sortedKeys() []fakeKey {
	keys := make([]fakeKey, 0, len(f.cache))
	for k := range f.cache {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.namespace != b.namespace {
			return a.namespace < b.namespace
		}
		if a.name != b.name {
			return a.name < b.name
		}
		if a.group != b.group {
			return a.group < b.group
		}
		return a.kind < b.kind
	})
	return keys
}

func fakeDecode(object any) map[string]any {
	var text []byte
	switch v := object.(type) {
	case string:
		text = []byte(v)
	case []byte:
		text = v
	case json.RawMessage:
		text = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("kubewasm fake host: cannot encode %T: %v", object, err))
		}
		text = b
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		panic(fmt.Sprintf("kubewasm fake host: an object must be a JSON object: %s", text))
	}
	return m
}

func fakeKeyOf(o map[string]any) fakeKey {
	g := fakeGVK(o)
	name := fakeMetaStr(o, "name")
	if g.Kind == "" || g.Version == "" || name == "" {
		panic(fmt.Sprintf("kubewasm fake host: objects need apiVersion, kind and metadata.name, got %v", o))
	}
	return fakeKey{g.Group, g.Kind, fakeMetaStr(o, "namespace"), name}
}

func (f *FakeHost) store(object any) map[string]any {
	o := fakeDecode(object)
	k := fakeKeyOf(o)
	before := f.cache[k]
	m, _ := o["metadata"].(map[string]any)
	old := func(field string) string {
		if before == nil {
			return ""
		}
		return fakeMetaStr(before, field)
	}
	if _, ok := m["uid"]; !ok {
		uid := old("uid")
		if uid == "" {
			uid = "uid-" + k.name
			if k.namespace != "" {
				uid = "uid-" + k.namespace + "-" + k.name
			}
		}
		m["uid"] = uid
	}
	if _, ok := m["resourceVersion"]; !ok {
		rv := "1"
		if n, err := strconv.ParseUint(old("resourceVersion"), 10, 64); err == nil {
			rv = strconv.FormatUint(n+1, 10)
		}
		m["resourceVersion"] = rv
	}
	if _, ok := m["creationTimestamp"]; !ok {
		ts := old("creationTimestamp")
		if ts == "" {
			ts = f.clock.UTC().Format(time.RFC3339)
		}
		m["creationTimestamp"] = ts
	}
	f.cache[k] = o
	return o
}

// ---- deltas ----

func (f *FakeHost) hand(o map[string]any) uint32 {
	h := f.next
	f.next++
	f.handles[h] = o
	return h
}

func (f *FakeHost) delta(t DeltaType, o, old map[string]any) *Delta {
	g := fakeGVK(o)
	ns := fakeMetaStr(o, "namespace")
	labels := fakePairs(o, "labels")
	var sub uint32
	if f.reg != nil {
		first, fit := -1, -1
		for i, s := range f.reg.Subscriptions {
			if !fakeNames(s.Kind, g) {
				continue
			}
			if first < 0 {
				first = i
			}
			if s.Namespace != "" && s.Namespace != ns {
				continue
			}
			if s.LabelSelector != "" {
				sel, err := parseFakeSelector(s.LabelSelector)
				if err != nil || !sel.matches(labels) {
					continue
				}
			}
			wanted := t == Requeue
			for _, dt := range s.Deltas {
				wanted = wanted || dt == t
			}
			if wanted {
				fit = i
				break
			}
		}
		if fit < 0 {
			fit = first
		}
		if fit > 0 {
			sub = uint32(fit)
		}
	}
	d := &Delta{
		Type: t, Subscription: sub, Namespace: ns, Name: fakeMetaStr(o, "name"), UID: fakeMetaStr(o, "uid"),
		ResourceVersion: fakeMetaStr(o, "resourceVersion"), Object: own(f.hand(o)), Attempt: 1,
	}
	if old != nil {
		d.OldObject = own(f.hand(old))
	}
	return d
}

// Added puts object into the cache and returns its Added delta, for the
// first subscription of its kind whose namespace, label selector and delta
// types fit (else the first of its kind, else 0). Its fields are plain:
// set Initial, Attempt, LastFailure or Subscription as a test needs.
func (f *FakeHost) Added(object any) *Delta { return f.delta(Added, f.store(object), nil) }

// Updated replaces the cached object and returns the Updated delta with the
// cached one as its old state; it panics when the object is not cached.
func (f *FakeHost) Updated(object any) *Delta {
	o := fakeDecode(object)
	old, ok := f.cache[fakeKeyOf(o)]
	if !ok {
		panic(fmt.Sprintf("kubewasm fake host: Updated: %v is not in the cache: Put it first", fakeKeyOf(o)))
	}
	return f.delta(Updated, f.store(o), old)
}

// Deleted removes the object (matched by kind, namespace and name) from
// the cache and returns its Deleted delta, carrying the cached state (or
// object itself when it was not cached).
func (f *FakeHost) Deleted(object any) *Delta {
	o := fakeDecode(object)
	k := fakeKeyOf(o)
	if cached, ok := f.cache[k]; ok {
		o = cached
		delete(f.cache, k)
	}
	return f.delta(Deleted, o, nil)
}

// Resync puts object and returns its Resync delta.
func (f *FakeHost) Resync(object any) *Delta { return f.delta(Resync, f.store(object), nil) }

// Requeue puts object and returns its Requeue delta (what the host delivers
// after RequeueAfter).
func (f *FakeHost) Requeue(object any) *Delta { return f.delta(Requeue, f.store(object), nil) }

// Synced is the Synced delta of subscription sub: no object.
func (f *FakeHost) Synced(sub uint32) *Delta {
	return &Delta{Type: Synced, Subscription: sub, Attempt: 1}
}

// ---- what the plugin did ----

// Actions is every action accepted so far, in order.
func (f *FakeHost) Actions() []FakeAction { return append([]FakeAction(nil), f.actions...) }

// TakeActions returns the actions accepted so far and clears them.
func (f *FakeHost) TakeActions() []FakeAction {
	a := f.actions
	f.actions = nil
	return a
}

// TakeActionLines is TakeActions, one line each (FakeAction.String).
func (f *FakeHost) TakeActionLines() []string {
	var out []string
	for _, a := range f.TakeActions() {
		out = append(out, a.String())
	}
	return out
}

// Logs is every record logged so far (at the enabled levels).
func (f *FakeHost) Logs() []FakeLog { return append([]FakeLog(nil), f.logs...) }

// TakeLogs returns the records logged so far and clears them.
func (f *FakeHost) TakeLogs() []FakeLog {
	l := f.logs
	f.logs = nil
	return l
}

// SetLogLevel makes records below level neither enabled nor kept (default:
// every level).
func (f *FakeHost) SetLogLevel(level Level) { f.logLevel = level }

// LiveHandles is how many object and selector handles the plugin holds
// (the host bounds them).
func (f *FakeHost) LiveHandles() int { return len(f.handles) + len(f.selectors) }

// ---- the clock ----

// SetClock sets the clock.
func (f *FakeHost) SetClock(t time.Time) { f.clock = t }

// SetTime sets the clock to an RFC 3339 time (`2026-11-22T17:00:00Z`); it
// panics on another format.
func (f *FakeHost) SetTime(rfc3339 string) {
	t, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		panic(fmt.Sprintf("kubewasm fake host: SetTime: %v", err))
	}
	f.clock = t
}

// Advance moves the clock forward (as a test waits out a requeue).
func (f *FakeHost) Advance(d time.Duration) { f.clock = f.clock.Add(d) }

// String is one line per action, the same in every language's fake:
// `apply ConfigMap team-a/settings force`, `apply-status Widget ns/w`,
// `patch ConfigMap demo/greeting merge {...} uid=U`, `delete ConfigMap
// team-a/settings background uid=U`, `event ConfigMap demo/greeting Normal
// Reason: note uid=U`; preconditions (`uid=`, `rv=`) last. An apply's
// object is left out (see Object).
func (a FakeAction) String() string {
	var b strings.Builder
	pre := func(p Preconditions) {
		if p.UID != "" {
			b.WriteString(" uid=" + p.UID)
		}
		if p.ResourceVersion != "" {
			b.WriteString(" rv=" + p.ResourceVersion)
		}
	}
	kind := func(k KindRef) string {
		if k.Resource != "" {
			return k.Resource
		}
		return k.GVK.Kind
	}
	switch a.Verb {
	case "apply", "apply-status":
		k := fakeKeyOf(a.Object)
		fmt.Fprintf(&b, "%s %s %s", a.Verb, k.kind, key(k.namespace, k.name))
		if a.Force {
			b.WriteString(" force")
		}
		pre(a.Preconditions)
	case "patch":
		t := "merge"
		if a.PatchType == JSONPatchType {
			t = "json"
		}
		fmt.Fprintf(&b, "patch %s %s %s %s", kind(a.Target.Kind), a.Target.Key(), t, a.Patch)
		pre(a.Preconditions)
	case "delete":
		p := [...]string{"background", "foreground", "orphan"}[a.Propagation%3]
		fmt.Fprintf(&b, "delete %s %s %s", kind(a.Target.Kind), a.Target.Key(), p)
		pre(a.Preconditions)
	case "event":
		t := "Normal"
		if a.Event.Type == Warning {
			t = "Warning"
		}
		e := a.Event
		fmt.Fprintf(&b, "event %s %s %s %s: %s", kind(e.Regarding.Kind), e.Regarding.Key(), t, e.Reason, e.Note)
		if e.RegardingUID != "" {
			b.WriteString(" uid=" + e.RegardingUID)
		}
	}
	return b.String()
}

// String is `info copy deleted copy=team-a/settings source=default/settings`.
func (l FakeLog) String() string {
	var b strings.Builder
	b.WriteString([...]string{"trace", "debug", "info", "warn", "error"}[l.Level%5] + " " + l.Message)
	for _, p := range l.Fields {
		b.WriteString(" " + p.Key + "=" + p.Value)
	}
	return b.String()
}

// ---- reading objects ----

func fakeMeta(o map[string]any) map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}

func fakeMetaStr(o map[string]any, field string) string {
	s, _ := fakeMeta(o)[field].(string)
	return s
}

func fakeGVK(o map[string]any) GVK {
	av, _ := o["apiVersion"].(string)
	k, _ := o["kind"].(string)
	return GVKFromAPIVersion(av, k)
}

func fakePairs(o map[string]any, field string) []Pair {
	m, _ := fakeMeta(o)[field].(map[string]any)
	var out []Pair
	for k, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, Pair{k, s})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func fakeOwners(o map[string]any) []OwnerReference {
	refs, _ := fakeMeta(o)["ownerReferences"].([]any)
	var out []OwnerReference
	for _, r := range refs {
		m, _ := r.(map[string]any)
		s := func(k string) string { v, _ := m[k].(string); return v }
		b := func(k string) bool { v, _ := m[k].(bool); return v }
		out = append(out, OwnerReference{APIVersion: s("apiVersion"), Kind: s("kind"), Name: s("name"),
			UID: s("uid"), Controller: b("controller"), BlockOwnerDeletion: b("blockOwnerDeletion")})
	}
	return out
}

func fakeFinalizers(o map[string]any) []string {
	list, _ := fakeMeta(o)["finalizers"].([]any)
	var out []string
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// fakeJSON is compact JSON as the host writes it (no HTML escaping).
func fakeJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

func fakeFieldValue(v any) FieldValue {
	switch x := v.(type) {
	case nil:
		return FieldValue{Kind: FieldNull}
	case bool:
		return FieldValue{Kind: FieldBool, Bool: x}
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return FieldValue{Kind: FieldInt, Int: i}
		}
		fl, _ := strconv.ParseFloat(string(x), 64)
		return FieldValue{Kind: FieldFloat, Float: fl}
	case float64:
		return FieldValue{Kind: FieldFloat, Float: x}
	case string:
		return FieldValue{Kind: FieldText, Text: x}
	}
	return FieldValue{Kind: FieldJSON, Text: fakeJSON(v)}
}

// fakePointer walks an RFC 6901 pointer; `*` (when star) iterates arrays.
func fakePointer(o any, pointer string, star bool) []any {
	if pointer == "" {
		return []any{o}
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil
	}
	at := []any{o}
	for _, seg := range strings.Split(pointer[1:], "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		var next []any
		for _, v := range at {
			switch x := v.(type) {
			case map[string]any:
				if c, ok := x[seg]; ok {
					next = append(next, c)
				}
			case []any:
				if star && seg == "*" {
					next = append(next, x...)
				} else if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(x) && seg == strconv.Itoa(i) {
					next = append(next, x[i])
				}
			}
		}
		at = next
	}
	return at
}

func (f *FakeHost) obj(h uint32) map[string]any {
	o, ok := f.handles[h]
	if !ok {
		panic(fmt.Sprintf("kubewasm fake host: object handle %d is not live", h))
	}
	return o
}

// ---- kinds ----

// fakePlural is how the API server pluralises nearly every kind.
func fakePlural(kind string) string {
	l := strings.ToLower(kind)
	if strings.HasSuffix(l, "y") && len(l) > 1 && !strings.ContainsRune("aeiou", rune(l[len(l)-2])) {
		return l[:len(l)-1] + "ies"
	}
	for _, s := range []string{"s", "x", "ch", "sh"} {
		if strings.HasSuffix(l, s) {
			return l + "es"
		}
	}
	return l + "s"
}

// fakeNames reports whether k names objects of g (group and kind, any
// version); resource names resolve without discovery (the kind's plural
// or singular, then the group, optionally after a version).
func fakeNames(k KindRef, g GVK) bool {
	if k.Resource == "" {
		return k.Group == g.Group && k.GVK.Kind == g.Kind
	}
	res, group, _ := strings.Cut(k.Resource, ".")
	if res != fakePlural(g.Kind) && res != strings.ToLower(g.Kind) {
		return false
	}
	if group == "" || group == g.Group || (group == g.Version && g.Group == "") {
		return true
	}
	v, rest, ok := strings.Cut(group, ".")
	return ok && v == g.Version && rest == g.Group
}

func fakeSameKind(a, b KindRef) bool {
	switch {
	case a.Resource == "":
		return fakeNames(b, a.GVK)
	case b.Resource == "":
		return fakeNames(a, b.GVK)
	}
	return a.Resource == b.Resource
}

// ---- hostAPI ----

func (f *FakeHost) objectKind(h uint32) GVK         { return fakeGVK(f.obj(h)) }
func (f *FakeHost) objectNamespace(h uint32) string { return fakeMetaStr(f.obj(h), "namespace") }
func (f *FakeHost) objectName(h uint32) string      { return fakeMetaStr(f.obj(h), "name") }
func (f *FakeHost) objectUID(h uint32) string       { return fakeMetaStr(f.obj(h), "uid") }
func (f *FakeHost) objectResourceVersion(h uint32) string {
	return fakeMetaStr(f.obj(h), "resourceVersion")
}
func (f *FakeHost) objectGeneration(h uint32) (int64, bool) {
	v := fakeFieldValue(fakeMeta(f.obj(h))["generation"])
	return v.Int, v.Kind == FieldInt
}
func (f *FakeHost) objectLabel(h uint32, k string) (string, bool) {
	return lookup(fakePairs(f.obj(h), "labels"), k)
}
func (f *FakeHost) objectLabels(h uint32) []Pair { return fakePairs(f.obj(h), "labels") }
func (f *FakeHost) objectAnnotation(h uint32, k string) (string, bool) {
	return lookup(fakePairs(f.obj(h), "annotations"), k)
}
func (f *FakeHost) objectAnnotations(h uint32) []Pair { return fakePairs(f.obj(h), "annotations") }
func (f *FakeHost) objectOwnerReferences(h uint32) []OwnerReference {
	return fakeOwners(f.obj(h))
}
func (f *FakeHost) objectController(h uint32) (OwnerReference, bool) {
	m := ObjectMeta{OwnerReferences: fakeOwners(f.obj(h))}
	return m.ControllerOwner()
}
func (f *FakeHost) objectFinalizers(h uint32) []string { return fakeFinalizers(f.obj(h)) }
func (f *FakeHost) objectDeletionTimestamp(h uint32) (string, bool) {
	t := fakeMetaStr(f.obj(h), "deletionTimestamp")
	return t, t != ""
}
func (f *FakeHost) objectMeta(h uint32) ObjectMeta {
	o := f.obj(h)
	str := func(field string) *string {
		if s := fakeMetaStr(o, field); s != "" {
			return &s
		}
		return nil
	}
	m := ObjectMeta{
		APIVersion: fakeGVK(o).APIVersion(), Kind: fakeGVK(o).Kind, Namespace: fakeMetaStr(o, "namespace"),
		Name: fakeMetaStr(o, "name"), UID: fakeMetaStr(o, "uid"), ResourceVersion: fakeMetaStr(o, "resourceVersion"),
		Labels: fakePairs(o, "labels"), Annotations: fakePairs(o, "annotations"), OwnerReferences: fakeOwners(o),
		Finalizers: fakeFinalizers(o), CreationTimestamp: str("creationTimestamp"),
		DeletionTimestamp: str("deletionTimestamp"),
	}
	if g, ok := f.objectGeneration(h); ok {
		m.Generation = &g
	}
	return m
}
func (f *FakeHost) objectField(h uint32, pointer string) (FieldValue, bool) {
	found := fakePointer(f.obj(h), pointer, false)
	if len(found) == 0 {
		return FieldValue{}, false
	}
	return fakeFieldValue(found[0]), true
}
func (f *FakeHost) objectFields(h uint32, pointers []string) []*FieldValue {
	out := make([]*FieldValue, len(pointers))
	for i, p := range pointers {
		if v, ok := f.objectField(h, p); ok {
			out[i] = &v
		}
	}
	return out
}
func (f *FakeHost) objectToJSON(h uint32) string {
	o := f.obj(h)
	c := make(map[string]any, len(o))
	for k, v := range o {
		c[k] = v
	}
	if m := fakeMeta(o); m != nil {
		mc := make(map[string]any, len(m))
		for k, v := range m {
			if k != "managedFields" {
				mc[k] = v
			}
		}
		if a, ok := m["annotations"].(map[string]any); ok {
			ac := make(map[string]any, len(a))
			for k, v := range a {
				if k != "kubectl.kubernetes.io/last-applied-configuration" {
					ac[k] = v
				}
			}
			if len(ac) == 0 && len(a) > 0 {
				delete(mc, "annotations")
			} else {
				mc["annotations"] = ac
			}
		}
		c["metadata"] = mc
	}
	return fakeJSON(c)
}
func (f *FakeHost) objectDrop(h uint32) {
	f.obj(h)
	delete(f.handles, h)
}

func (f *FakeHost) selectorParse(text string) (uint32, error) {
	s, err := parseFakeSelector(text)
	if err != nil {
		return 0, err
	}
	h := f.next
	f.next++
	f.selectors[h] = s
	return h, nil
}
func (f *FakeHost) sel(h uint32) *fakeSelector {
	s, ok := f.selectors[h]
	if !ok {
		panic(fmt.Sprintf("kubewasm fake host: selector handle %d is not live", h))
	}
	return s
}
func (f *FakeHost) selectorMatches(h uint32, labels []Pair) bool { return f.sel(h).matches(labels) }
func (f *FakeHost) selectorMatchesObject(h, o uint32) bool {
	return f.sel(h).matches(fakePairs(f.obj(o), "labels"))
}
func (f *FakeHost) selectorString(h uint32) string { return f.sel(h).String() }
func (f *FakeHost) selectorDrop(h uint32) {
	f.sel(h)
	delete(f.selectors, h)
}

func (f *FakeHost) checkRead(kind KindRef) error {
	if f.reg == nil {
		return nil
	}
	for _, s := range f.reg.Subscriptions {
		if fakeSameKind(s.Kind, kind) {
			return nil
		}
	}
	return &CacheError{Kind: NotSubscribed, Message: kind.String() +
		" is not among the plugin's subscriptions (subscribe to it, with no delta types to only read it)"}
}

func (f *FakeHost) cacheGet(kind KindRef, namespace, name string) (uint32, bool, error) {
	if err := f.checkRead(kind); err != nil {
		return 0, false, err
	}
	for _, k := range f.sortedKeys() {
		o := f.cache[k]
		if k.namespace == namespace && k.name == name && fakeNames(kind, fakeGVK(o)) {
			return f.hand(o), true, nil
		}
	}
	return 0, false, nil
}
func (f *FakeHost) cacheList(kind KindRef, namespace, labelSelector string) ([]uint32, error) {
	if err := f.checkRead(kind); err != nil {
		return nil, err
	}
	sel, err := parseFakeSelector(labelSelector)
	if err != nil {
		return nil, &CacheError{Kind: InvalidSelector, Message: err.Error()}
	}
	var out []uint32
	for _, k := range f.sortedKeys() {
		o := f.cache[k]
		if (namespace == "" || k.namespace == namespace) && fakeNames(kind, fakeGVK(o)) &&
			sel.matches(fakePairs(o, "labels")) {
			out = append(out, f.hand(o))
		}
	}
	return out, nil
}
func (f *FakeHost) cacheByIndex(index, value string) ([]uint32, error) {
	var idx *Index
	if f.reg != nil {
		for i := range f.reg.Indexes {
			if f.reg.Indexes[i].Name == index {
				idx = &f.reg.Indexes[i]
			}
		}
	}
	if idx == nil {
		return nil, &CacheError{Kind: UnknownIndex, Message: fmt.Sprintf(
			"no index %q was declared at registration (FakeHost.Load registers the plugin)", index)}
	}
	var out []uint32
	for _, k := range f.sortedKeys() {
		o := f.cache[k]
		if !fakeNames(idx.Kind, fakeGVK(o)) {
			continue
		}
		for _, v := range fakePointer(o, idx.Pointer, true) {
			if k, ok := fakeIndexKey(fakeFieldValue(v)); ok && k == value {
				out = append(out, f.hand(o))
				break
			}
		}
	}
	return out, nil
}

// fakeIndexKey is the string an index keys a value by, as the host's.
func fakeIndexKey(v FieldValue) (string, bool) {
	switch v.Kind {
	case FieldText:
		return v.Text, true
	case FieldInt:
		return strconv.FormatInt(v.Int, 10), true
	case FieldBool:
		return strconv.FormatBool(v.Bool), true
	case FieldFloat:
		return strconv.FormatFloat(v.Float, 'f', -1, 64), true
	}
	return "", false
}

func (f *FakeHost) checkWrite(kind KindRef) error {
	if f.reg == nil {
		return nil
	}
	for _, w := range f.reg.Writes {
		if fakeSameKind(w, kind) {
			return nil
		}
	}
	return &ActionError{Kind: NotDeclared, Message: kind.String() + " is not among the registration's writes"}
}

func (f *FakeHost) applied(verb, objectJSON string, force bool, pre Preconditions) error {
	dec := json.NewDecoder(strings.NewReader(objectJSON))
	dec.UseNumber()
	var o map[string]any
	if err := dec.Decode(&o); err != nil || o == nil {
		return &ActionError{Kind: Invalid, Message: fmt.Sprintf("the object is not a JSON object: %v", err)}
	}
	g := fakeGVK(o)
	if g.Version == "" || g.Kind == "" || fakeMetaStr(o, "name") == "" {
		return &ActionError{Kind: Invalid, Message: "an applied object needs apiVersion, kind and metadata.name"}
	}
	if err := f.checkWrite(g.Ref()); err != nil {
		return err
	}
	f.actions = append(f.actions, FakeAction{Verb: verb, Object: o, Force: force, Preconditions: pre})
	return nil
}

func (f *FakeHost) apply(objectJSON string, force bool, pre Preconditions) error {
	return f.applied("apply", objectJSON, force, pre)
}
func (f *FakeHost) applyStatus(objectJSON string, pre Preconditions) error {
	return f.applied("apply-status", objectJSON, false, pre)
}
func (f *FakeHost) patch(target ObjectRef, t PatchType, patch string, pre Preconditions) error {
	var v any
	if err := json.Unmarshal([]byte(patch), &v); err != nil {
		return &ActionError{Kind: Invalid, Message: fmt.Sprintf("the patch is not JSON: %v", err)}
	}
	if _, isObject := v.(map[string]any); t == MergePatch && !isObject {
		return &ActionError{Kind: Invalid, Message: "a merge patch must be a JSON object"}
	}
	if _, isArray := v.([]any); t == JSONPatchType && !isArray {
		return &ActionError{Kind: Invalid, Message: "a JSON patch must be an array of operations"}
	}
	if err := f.checkWrite(target.Kind); err != nil {
		return err
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, []byte(patch))
	f.actions = append(f.actions, FakeAction{Verb: "patch", Target: target, PatchType: t, Patch: compact.String(),
		Preconditions: pre})
	return nil
}
func (f *FakeHost) delete(target ObjectRef, p Propagation, pre Preconditions) error {
	if err := f.checkWrite(target.Kind); err != nil {
		return err
	}
	f.actions = append(f.actions, FakeAction{Verb: "delete", Target: target, Propagation: p, Preconditions: pre})
	return nil
}
func (f *FakeHost) recordEvent(e EventRecord) error {
	if e.Reason == "" {
		return &ActionError{Kind: Invalid, Message: "an Event needs a reason"}
	}
	f.actions = append(f.actions, FakeAction{Verb: "event", Target: e.Regarding, Event: e})
	return nil
}

func (f *FakeHost) logEnabled(level Level) bool { return level >= f.logLevel }
func (f *FakeHost) logWrite(level Level, message string, fields []Pair) {
	if level >= f.logLevel {
		f.logs = append(f.logs, FakeLog{Level: level, Message: message, Fields: append([]Pair(nil), fields...)})
	}
}
func (f *FakeHost) now() (int64, uint32) { return f.clock.Unix(), uint32(f.clock.Nanosecond()) }
func (f *FakeHost) nowRFC3339() string   { return f.clock.UTC().Format(time.RFC3339) }
