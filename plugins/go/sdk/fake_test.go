package kubewasm

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// fakeObject is an object the fake host holds.
type fakeObject struct {
	kind                 GVK
	namespace, name, uid string
	resourceVersion      string
	labels, annotations  map[string]string
	owners               []OwnerReference
	finalizers           []string
	deletionTimestamp    string
	fields               map[string]FieldValue
}

// fakeHost implements hostAPI over Go values and records what the SDK
// asked of it: actions as text, handles alive.
type fakeHost struct {
	objects   map[uint32]*fakeObject
	selectors map[uint32]string
	next      uint32
	actions   []string
	logs      []string
	dropped   []uint32
	cache     []*fakeObject
	refuse    error
}

func newFake(t *testing.T) *fakeHost {
	f := &fakeHost{objects: map[uint32]*fakeObject{}, selectors: map[uint32]string{}, next: 1}
	host = f
	t.Cleanup(func() {
		dropOwned()
		host = nil
		factory, plugin = nil, nil
	})
	return f
}

// hand gives the guest a handle on o.
func (f *fakeHost) hand(o *fakeObject) uint32 {
	h := f.next
	f.next++
	f.objects[h] = o
	return h
}

func (f *fakeHost) obj(h uint32) *fakeObject {
	o, ok := f.objects[h]
	if !ok {
		panic(fmt.Sprintf("fake host: unknown object handle %d", h))
	}
	return o
}

func (f *fakeHost) live() int { return len(f.objects) + len(f.selectors) }

func pairs(m map[string]string) []Pair { return PairsOf(m) }

func (f *fakeHost) objectKind(h uint32) GVK               { return f.obj(h).kind }
func (f *fakeHost) objectNamespace(h uint32) string       { return f.obj(h).namespace }
func (f *fakeHost) objectName(h uint32) string            { return f.obj(h).name }
func (f *fakeHost) objectUID(h uint32) string             { return f.obj(h).uid }
func (f *fakeHost) objectResourceVersion(h uint32) string { return f.obj(h).resourceVersion }
func (f *fakeHost) objectGeneration(uint32) (int64, bool) { return 0, false }
func (f *fakeHost) objectLabel(h uint32, k string) (string, bool) {
	v, ok := f.obj(h).labels[k]
	return v, ok
}
func (f *fakeHost) objectLabels(h uint32) []Pair { return pairs(f.obj(h).labels) }
func (f *fakeHost) objectAnnotation(h uint32, k string) (string, bool) {
	v, ok := f.obj(h).annotations[k]
	return v, ok
}
func (f *fakeHost) objectAnnotations(h uint32) []Pair { return pairs(f.obj(h).annotations) }
func (f *fakeHost) objectOwnerReferences(h uint32) []OwnerReference {
	return append([]OwnerReference(nil), f.obj(h).owners...)
}
func (f *fakeHost) objectController(h uint32) (OwnerReference, bool) {
	m := ObjectMeta{OwnerReferences: f.obj(h).owners}
	return m.ControllerOwner()
}
func (f *fakeHost) objectFinalizers(h uint32) []string {
	return append([]string(nil), f.obj(h).finalizers...)
}
func (f *fakeHost) objectDeletionTimestamp(h uint32) (string, bool) {
	t := f.obj(h).deletionTimestamp
	return t, t != ""
}
func (f *fakeHost) objectMeta(h uint32) ObjectMeta {
	o := f.obj(h)
	return ObjectMeta{
		APIVersion: o.kind.APIVersion(), Kind: o.kind.Kind, Namespace: o.namespace, Name: o.name,
		UID: o.uid, ResourceVersion: o.resourceVersion, Labels: pairs(o.labels),
		Annotations: pairs(o.annotations), OwnerReferences: o.owners, Finalizers: o.finalizers,
	}
}
func (f *fakeHost) objectField(h uint32, p string) (FieldValue, bool) {
	v, ok := f.obj(h).fields[p]
	return v, ok
}
func (f *fakeHost) objectFields(h uint32, ps []string) []*FieldValue {
	out := make([]*FieldValue, len(ps))
	for i, p := range ps {
		if v, ok := f.objectField(h, p); ok {
			out[i] = &v
		}
	}
	return out
}
func (f *fakeHost) objectToJSON(h uint32) string {
	o := f.obj(h)
	return fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q}}`,
		o.kind.APIVersion(), o.kind.Kind, o.name, o.namespace)
}
func (f *fakeHost) objectDrop(h uint32) {
	f.obj(h)
	delete(f.objects, h)
	f.dropped = append(f.dropped, h)
}

// Selectors: `k=v` terms only (the real grammar is the host's).
func (f *fakeHost) selectorParse(text string) (uint32, error) {
	if strings.Contains(text, "!") {
		return 0, errors.New("unable to parse requirement: " + text)
	}
	h := f.next
	f.next++
	f.selectors[h] = text
	return h, nil
}
func (f *fakeHost) selectorMatches(h uint32, labels []Pair) bool {
	text, ok := f.selectors[h]
	if !ok {
		panic("fake host: unknown selector handle")
	}
	for _, term := range strings.Split(text, ",") {
		if term == "" {
			continue
		}
		k, v, _ := strings.Cut(term, "=")
		if got, ok := lookup(labels, k); !ok || got != v {
			return false
		}
	}
	return true
}
func (f *fakeHost) selectorMatchesObject(h, o uint32) bool {
	return f.selectorMatches(h, pairs(f.obj(o).labels))
}
func (f *fakeHost) selectorString(h uint32) string {
	terms := strings.Split(f.selectors[h], ",")
	sort.Strings(terms)
	return strings.Trim(strings.Join(terms, ","), ",")
}
func (f *fakeHost) selectorDrop(h uint32) {
	if _, ok := f.selectors[h]; !ok {
		panic("fake host: selector dropped twice")
	}
	delete(f.selectors, h)
}

func (f *fakeHost) cacheGet(kind KindRef, ns, name string) (uint32, bool, error) {
	if f.refuse != nil {
		return 0, false, f.refuse
	}
	for _, o := range f.cache {
		if o.kind.Is(kind) && o.namespace == ns && o.name == name {
			return f.hand(o), true, nil
		}
	}
	return 0, false, nil
}
func (f *fakeHost) cacheList(kind KindRef, ns, sel string) ([]uint32, error) {
	if f.refuse != nil {
		return nil, f.refuse
	}
	var out []uint32
	for _, o := range f.cache {
		if o.kind.Is(kind) && (ns == "" || o.namespace == ns) {
			out = append(out, f.hand(o))
		}
	}
	return out, nil
}
func (f *fakeHost) cacheByIndex(string, string) ([]uint32, error) {
	return nil, &CacheError{Kind: UnknownIndex, Message: "no index"}
}

func pre(p Preconditions) string { return fmt.Sprintf("uid=%q rv=%q", p.UID, p.ResourceVersion) }

func (f *fakeHost) record(s string) error {
	if f.refuse != nil {
		return f.refuse
	}
	f.actions = append(f.actions, s)
	return nil
}
func (f *fakeHost) apply(j string, force bool, p Preconditions) error {
	return f.record(fmt.Sprintf("apply force=%v %s %s", force, pre(p), j))
}
func (f *fakeHost) applyStatus(j string, p Preconditions) error {
	return f.record(fmt.Sprintf("apply-status %s %s", pre(p), j))
}
func (f *fakeHost) patch(t ObjectRef, pt PatchType, patch string, p Preconditions) error {
	return f.record(fmt.Sprintf("patch %d %s %s %s %s", pt, t.Kind, t.Key(), pre(p), patch))
}
func (f *fakeHost) delete(t ObjectRef, prop Propagation, p Preconditions) error {
	return f.record(fmt.Sprintf("delete %d %s %s %s", prop, t.Kind, t.Key(), pre(p)))
}
func (f *fakeHost) recordEvent(e EventRecord) error {
	return f.record(fmt.Sprintf("event %d %s %s uid=%q %s %q", e.Type, e.Regarding.Kind, e.Regarding.Key(),
		e.RegardingUID, e.Reason, e.Note))
}
func (f *fakeHost) logEnabled(l Level) bool { return l >= LevelInfo }
func (f *fakeHost) logWrite(l Level, m string, fields []Pair) {
	f.logs = append(f.logs, fmt.Sprint(l, " ", m, " ", fields))
}
func (f *fakeHost) now() (int64, uint32) { return 1700000000, 5 }
func (f *fakeHost) nowRFC3339() string   { return "2023-11-14T22:13:20Z" }

func wantActions(t *testing.T, f *fakeHost, want ...string) {
	t.Helper()
	if strings.Join(f.actions, "\n") != strings.Join(want, "\n") {
		t.Fatalf("actions:\n%s\nwant:\n%s", strings.Join(f.actions, "\n"), strings.Join(want, "\n"))
	}
	f.actions = nil
}
