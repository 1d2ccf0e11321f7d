//go:build wasip1

package kubewasm

// The component model's canonical ABI for kubewasm:plugin@0.2.0, written by
// hand for Go's GOOS=wasip1 (64-bit pointers, so generated bindings whose
// structs mirror the 32-bit memory layout cannot be used): imports are
// //go:wasmimport functions over flat i32 parameters (with the legacy
// core names wit-component (`kubewasm componentize`) expects: module
// `kubewasm:plugin/<interface>@0.2.0`, functions `[method]object.label`,
// `[static]label-selector.parse`, `[resource-drop]object`), exports are
// //go:wasmexport functions, and memory the host writes into (arguments of
// exports, results of imports) comes from an arena outside the Go heap:
// cabi_realloc runs while the host is lowering values, when the guest may
// not call out (a Go allocation can reach clock_time_get), so it must not
// allocate. Each import copies its results into Go values and gives its
// arena memory back; the arena is reset after each export call
// (post-return). The byte offsets below follow the canonical ABI layout of
// each WIT type (checked against wit-bindgen's C structs for wasm32).
//
// Resources are i32 handles: `own` ones (a delta's objects, cache results,
// parsed selectors) are the guest's to drop with [resource-drop]; `borrow`
// ones (self of a method, matches-object's object) are passed as is.

import (
	"errors"
	"math"
	"unsafe"
)

func init() { host = wasmHost{} }

const arenaSize = 4 << 20

var (
	arena    [arenaSize / 8]uint64 // 8-aligned
	arenaTop uint32
	// The WASI adapter's own allocations (its state), never freed.
	adapterArena [256 << 10 / 8]uint64
	adapterTop   uint32
	// Return area for imports: results are read right after each call
	// (the largest, object-meta, is 128 bytes).
	retArea [64]uint64
)

// outOfBounds is what cabi_realloc answers when the arena is exhausted:
// an aligned address past the end of any memory Go has, so that the host
// traps instead of writing anywhere.
const outOfBounds = ^uint32(0) &^ 7

func addr(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }
func at(a uint32) unsafe.Pointer   { return unsafe.Pointer(uintptr(a)) }

func load8(a uint32) uint8   { return *(*uint8)(at(a)) }
func load32(a uint32) uint32 { return *(*uint32)(at(a)) }
func load64(a uint32) uint64 { return *(*uint64)(at(a)) }

func store8(a uint32, v uint8)   { *(*uint8)(at(a)) = v }
func store32(a uint32, v uint32) { *(*uint32)(at(a)) = v }
func store64(a uint32, v uint64) { *(*uint64)(at(a)) = v }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func bump(base uint32, top *uint32, limit uint32, align, size uint32) uint32 {
	if align == 0 {
		align = 1
	}
	start := (base + *top + align - 1) &^ (align - 1)
	end := start + size
	if end > base+limit || end < start {
		return 0
	}
	*top = end - base
	return start
}

// alloc takes memory from the arena (valid until the export returns, or
// until the import wrapper that took it releases its mark).
func alloc(size, align uint32) uint32 {
	p := bump(addr(unsafe.Pointer(&arena[0])), &arenaTop, arenaSize, align, size)
	if p == 0 {
		panic("kubewasm: arena exhausted")
	}
	return p
}

// mark and release bracket an import call: what it took from the arena
// (arguments and results, copied into Go values) is given back.
func mark() uint32            { return arenaTop }
func release(top uint32)      { arenaTop = top }
func resetArena()             { arenaTop = 0 }
func ret() uint32             { return addr(unsafe.Pointer(&retArea[0])) }
func retAt(off uint32) uint32 { return ret() + off }

//go:wasmexport cabi_realloc
//go:nosplit
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	if old != 0 && newSize <= oldSize {
		return old
	}
	p := bump(addr(unsafe.Pointer(&arena[0])), &arenaTop, arenaSize, align, newSize)
	if p == 0 {
		return outOfBounds
	}
	if old != 0 && oldSize > 0 {
		copy(unsafe.Slice((*byte)(at(p)), oldSize), unsafe.Slice((*byte)(at(old)), oldSize))
	}
	return p
}

//go:wasmexport cabi_realloc_adapter
//go:nosplit
func cabiReallocAdapter(old, oldSize, align, newSize uint32) uint32 {
	if old != 0 && newSize <= oldSize {
		return old
	}
	p := bump(addr(unsafe.Pointer(&adapterArena[0])), &adapterTop, uint32(len(adapterArena)*8), align, newSize)
	if p == 0 {
		return outOfBounds
	}
	if old != 0 && oldSize > 0 {
		copy(unsafe.Slice((*byte)(at(p)), oldSize), unsafe.Slice((*byte)(at(old)), oldSize))
	}
	return p
}

// ---- lowering and lifting ----------------------------------------------------

// loadString copies the string (ptr, len) stored at a into the Go heap.
func loadString(a uint32) string { return stringAt(load32(a), load32(a+4)) }

func stringAt(p, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(at(p)), n))
}

// loadOptString reads an option<string> (12 bytes) at a.
func loadOptString(a uint32) (string, bool) {
	if load8(a) == 0 {
		return "", false
	}
	return loadString(a + 4), true
}

func loadOptStringPtr(a uint32) *string {
	s, ok := loadOptString(a)
	if !ok {
		return nil
	}
	return &s
}

// loadPairs reads a list<tuple<string, string>> (ptr, len) at a.
func loadPairs(a uint32) []Pair {
	p, n := load32(a), load32(a+4)
	out := make([]Pair, n)
	for i := uint32(0); i < n; i++ {
		out[i] = Pair{Key: loadString(p + 16*i), Value: loadString(p + 16*i + 8)}
	}
	return out
}

// loadStrings reads a list<string> (ptr, len) at a.
func loadStrings(a uint32) []string {
	p, n := load32(a), load32(a+4)
	out := make([]string, n)
	for i := uint32(0); i < n; i++ {
		out[i] = loadString(p + 8*i)
	}
	return out
}

// loadGVK reads a group-version-kind (24 bytes) at a.
func loadGVK(a uint32) GVK {
	return GVK{Group: loadString(a), Version: loadString(a + 8), Kind: loadString(a + 16)}
}

// loadOwner reads an owner-reference (36 bytes) at a.
func loadOwner(a uint32) OwnerReference {
	return OwnerReference{
		APIVersion:         loadString(a),
		Kind:               loadString(a + 8),
		Name:               loadString(a + 16),
		UID:                loadString(a + 24),
		Controller:         load8(a+32) != 0,
		BlockOwnerDeletion: load8(a+33) != 0,
	}
}

func loadOwners(a uint32) []OwnerReference {
	p, n := load32(a), load32(a+4)
	out := make([]OwnerReference, n)
	for i := uint32(0); i < n; i++ {
		out[i] = loadOwner(p + 36*i)
	}
	return out
}

// loadMeta reads an object-meta (128 bytes, 8-aligned) at m.
func loadMeta(m uint32) ObjectMeta {
	meta := ObjectMeta{
		APIVersion:      loadString(m),
		Kind:            loadString(m + 8),
		Name:            loadString(m + 28),
		UID:             loadString(m + 36),
		ResourceVersion: loadString(m + 44),
	}
	meta.Namespace, _ = loadOptString(m + 16)
	if load8(m+56) != 0 {
		g := int64(load64(m + 64))
		meta.Generation = &g
	}
	meta.Labels = loadPairs(m + 72)
	meta.Annotations = loadPairs(m + 80)
	meta.OwnerReferences = loadOwners(m + 88)
	meta.Finalizers = loadStrings(m + 96)
	meta.CreationTimestamp = loadOptStringPtr(m + 104)
	meta.DeletionTimestamp = loadOptStringPtr(m + 116)
	return meta
}

// loadField reads a field-value (16 bytes, 8-aligned: case at a, payload
// at a+8).
func loadField(a uint32) FieldValue {
	v := FieldValue{Kind: FieldKind(load8(a))}
	switch v.Kind {
	case FieldBool:
		v.Bool = load8(a+8) != 0
	case FieldInt:
		v.Int = int64(load64(a + 8))
	case FieldFloat:
		v.Float = math.Float64frombits(load64(a + 8))
	case FieldText, FieldJSON:
		v.Text = loadString(a + 8)
	}
	return v
}

// loadFailure reads an option<failure> (16 bytes) at a.
func loadFailure(a uint32) *Failure {
	if load8(a) == 0 {
		return nil
	}
	return &Failure{Kind: FailureKind(load8(a + 4)), Message: loadString(a + 8)}
}

// putString copies s into the arena and stores (ptr, len) at a.
func putString(a uint32, s string) {
	p, n := argString(s)
	store32(a, p)
	store32(a+4, n)
}

// argString copies s into the arena for an import argument.
func argString(s string) (uint32, uint32) {
	p := alloc(uint32(len(s)), 1)
	if len(s) > 0 {
		copy(unsafe.Slice((*byte)(at(p)), len(s)), s)
	}
	return p, uint32(len(s))
}

// argOptString: option<string> as three flat parameters ("" is none).
func argOptString(s string) (uint32, uint32, uint32) {
	if s == "" {
		return 0, 0, 0
	}
	p, n := argString(s)
	return 1, p, n
}

// putOptString stores an option<string> (12 bytes; "" is none) at a.
func putOptString(a uint32, s string) {
	if s == "" {
		store8(a, 0)
		return
	}
	store8(a, 1)
	putString(a+4, s)
}

// argKind: kind-ref as seven flat parameters.
func argKind(k KindRef) (d, a, b, c, e, f, g uint32) {
	if k.Resource != "" {
		a, b = argString(k.Resource)
		return 1, a, b, 0, 0, 0, 0
	}
	a, b = argString(k.Group)
	c, e = argString(k.Version)
	f, g = argString(k.GVK.Kind)
	return 0, a, b, c, e, f, g
}

// putKind stores a kind-ref (28 bytes) at a.
func putKind(a uint32, k KindRef) {
	if k.Resource != "" {
		store8(a, 1)
		putString(a+4, k.Resource)
		return
	}
	store8(a, 0)
	putString(a+4, k.Group)
	putString(a+12, k.Version)
	putString(a+20, k.GVK.Kind)
}

// putRef stores an object-ref (48 bytes: kind-ref, namespace, name) at a.
func putRef(a uint32, r ObjectRef) {
	putKind(a, r.Kind)
	putOptString(a+28, r.Namespace)
	putString(a+40, r.Name)
}

// putPre stores preconditions (24 bytes: uid, resource-version) at a.
func putPre(a uint32, p Preconditions) {
	putOptString(a, p.UID)
	putOptString(a+12, p.ResourceVersion)
}

// argPre: preconditions as six flat parameters.
func argPre(p Preconditions) (a, b, c, d, e, f uint32) {
	a, b, c = argOptString(p.UID)
	d, e, f = argOptString(p.ResourceVersion)
	return
}

// argPairs stores a list<tuple<string, string>> in the arena.
func argPairs(pairs []Pair) (uint32, uint32) {
	p := alloc(uint32(16*len(pairs)), 4)
	for i, kv := range pairs {
		putString(p+uint32(16*i), kv.Key)
		putString(p+uint32(16*i)+8, kv.Value)
	}
	return p, uint32(len(pairs))
}

// argStrings stores a list<string> in the arena.
func argStrings(list []string) (uint32, uint32) {
	p := alloc(uint32(8*len(list)), 4)
	for i, s := range list {
		putString(p+uint32(8*i), s)
	}
	return p, uint32(len(list))
}

// ---- imports ---------------------------------------------------------------

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.kind
func importObjectKind(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.namespace
func importObjectNamespace(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.name
func importObjectName(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.uid
func importObjectUID(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.resource-version
func importObjectResourceVersion(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.generation
func importObjectGeneration(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.label
func importObjectLabel(self, p, n, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.labels
func importObjectLabels(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.annotation
func importObjectAnnotation(self, p, n, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.annotations
func importObjectAnnotations(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.owner-references
func importObjectOwnerReferences(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.controller
func importObjectController(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.finalizers
func importObjectFinalizers(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.deletion-timestamp
func importObjectDeletionTimestamp(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.meta
func importObjectMeta(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.field
func importObjectField(self, p, n, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.fields
func importObjectFields(self, p, n, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [method]object.to-json
func importObjectToJSON(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.2.0 [resource-drop]object
func importObjectDrop(self uint32)

//go:wasmimport kubewasm:plugin/selectors@0.2.0 [static]label-selector.parse
func importSelectorParse(p, n, ret uint32)

//go:wasmimport kubewasm:plugin/selectors@0.2.0 [method]label-selector.matches
func importSelectorMatches(self, p, n uint32) uint32

//go:wasmimport kubewasm:plugin/selectors@0.2.0 [method]label-selector.matches-object
func importSelectorMatchesObject(self, object uint32) uint32

//go:wasmimport kubewasm:plugin/selectors@0.2.0 [method]label-selector.to-string
func importSelectorToString(self, ret uint32)

//go:wasmimport kubewasm:plugin/selectors@0.2.0 [resource-drop]label-selector
func importSelectorDrop(self uint32)

//go:wasmimport kubewasm:plugin/cache@0.2.0 get
func importCacheGet(k0, k1, k2, k3, k4, k5, k6, ns0, ns1, ns2, name0, name1, ret uint32)

//go:wasmimport kubewasm:plugin/cache@0.2.0 list
func importCacheList(k0, k1, k2, k3, k4, k5, k6, ns0, ns1, ns2, s0, s1, s2, ret uint32)

//go:wasmimport kubewasm:plugin/cache@0.2.0 by-index
func importCacheByIndex(i0, i1, v0, v1, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.2.0 apply
func importApply(p, n, force, u0, u1, u2, r0, r1, r2, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.2.0 apply-status
func importApplyStatus(p, n, u0, u1, u2, r0, r1, r2, ret uint32)

// patch, delete and record-event have more than 16 flat parameters: they
// take one pointer to their parameters laid out in memory.
//
//go:wasmimport kubewasm:plugin/actions@0.2.0 patch
func importPatch(params, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.2.0 delete
func importDelete(params, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.2.0 record-event
func importRecordEvent(params, ret uint32)

//go:wasmimport kubewasm:plugin/log@0.2.0 enabled
func importLogEnabled(level uint32) uint32

//go:wasmimport kubewasm:plugin/log@0.2.0 write
func importLogWrite(level, m0, m1, f0, f1 uint32)

//go:wasmimport kubewasm:plugin/clock@0.2.0 now
func importClockNow(ret uint32)

//go:wasmimport kubewasm:plugin/clock@0.2.0 now-rfc3339
func importClockNowRFC3339(ret uint32)

// ---- the host over the imports ---------------------------------------------

type wasmHost struct{}

// stringCall runs an import returning a string into the return area.
func stringCall(f func(self, ret uint32), self uint32) string {
	top := mark()
	f(self, ret())
	s := loadString(ret())
	release(top)
	return s
}

func optStringCall(f func(self, ret uint32), self uint32) (string, bool) {
	top := mark()
	f(self, ret())
	s, ok := loadOptString(ret())
	release(top)
	return s, ok
}

func pairsCall(f func(self, ret uint32), self uint32) []Pair {
	top := mark()
	f(self, ret())
	p := loadPairs(ret())
	release(top)
	return p
}

func lookupCall(f func(self, p, n, ret uint32), self uint32, key string) (string, bool) {
	top := mark()
	p, n := argString(key)
	f(self, p, n, ret())
	s, ok := loadOptString(ret())
	release(top)
	return s, ok
}

func (wasmHost) objectKind(h uint32) GVK {
	top := mark()
	importObjectKind(h, ret())
	g := loadGVK(ret())
	release(top)
	return g
}

func (wasmHost) objectNamespace(h uint32) string {
	ns, _ := optStringCall(importObjectNamespace, h)
	return ns
}

func (wasmHost) objectName(h uint32) string { return stringCall(importObjectName, h) }
func (wasmHost) objectUID(h uint32) string  { return stringCall(importObjectUID, h) }
func (wasmHost) objectResourceVersion(h uint32) string {
	return stringCall(importObjectResourceVersion, h)
}

func (wasmHost) objectGeneration(h uint32) (int64, bool) {
	importObjectGeneration(h, ret())
	if load8(ret()) == 0 {
		return 0, false
	}
	return int64(load64(retAt(8))), true
}

func (wasmHost) objectLabel(h uint32, key string) (string, bool) {
	return lookupCall(importObjectLabel, h, key)
}

func (wasmHost) objectLabels(h uint32) []Pair { return pairsCall(importObjectLabels, h) }

func (wasmHost) objectAnnotation(h uint32, key string) (string, bool) {
	return lookupCall(importObjectAnnotation, h, key)
}

func (wasmHost) objectAnnotations(h uint32) []Pair { return pairsCall(importObjectAnnotations, h) }

func (wasmHost) objectOwnerReferences(h uint32) []OwnerReference {
	top := mark()
	importObjectOwnerReferences(h, ret())
	o := loadOwners(ret())
	release(top)
	return o
}

func (wasmHost) objectController(h uint32) (OwnerReference, bool) {
	top := mark()
	importObjectController(h, ret())
	defer release(top)
	if load8(ret()) == 0 {
		return OwnerReference{}, false
	}
	return loadOwner(retAt(4)), true
}

func (wasmHost) objectFinalizers(h uint32) []string {
	top := mark()
	importObjectFinalizers(h, ret())
	f := loadStrings(ret())
	release(top)
	return f
}

func (wasmHost) objectDeletionTimestamp(h uint32) (string, bool) {
	return optStringCall(importObjectDeletionTimestamp, h)
}

func (wasmHost) objectMeta(h uint32) ObjectMeta {
	top := mark()
	importObjectMeta(h, ret())
	m := loadMeta(ret())
	release(top)
	return m
}

func (wasmHost) objectField(h uint32, pointer string) (FieldValue, bool) {
	top := mark()
	defer release(top)
	p, n := argString(pointer)
	importObjectField(h, p, n, ret())
	if load8(ret()) == 0 {
		return FieldValue{}, false
	}
	return loadField(retAt(8)), true
}

func (wasmHost) objectFields(h uint32, pointers []string) []*FieldValue {
	top := mark()
	defer release(top)
	p, n := argStrings(pointers)
	importObjectFields(h, p, n, ret())
	list, count := load32(ret()), load32(retAt(4))
	out := make([]*FieldValue, count)
	for i := uint32(0); i < count; i++ {
		e := list + 24*i // option<field-value>: 24 bytes, value at +8
		if load8(e) != 0 {
			v := loadField(e + 8)
			out[i] = &v
		}
	}
	return out
}

func (wasmHost) objectToJSON(h uint32) string { return stringCall(importObjectToJSON, h) }
func (wasmHost) objectDrop(h uint32)          { importObjectDrop(h) }

func (wasmHost) selectorParse(text string) (uint32, error) {
	top := mark()
	defer release(top)
	p, n := argString(text)
	importSelectorParse(p, n, ret())
	if load8(ret()) != 0 {
		return 0, errors.New(loadString(retAt(4)))
	}
	return load32(retAt(4)), nil
}

func (wasmHost) selectorMatches(h uint32, labels []Pair) bool {
	top := mark()
	defer release(top)
	p, n := argPairs(labels)
	return importSelectorMatches(h, p, n) != 0
}

func (wasmHost) selectorMatchesObject(h, object uint32) bool {
	return importSelectorMatchesObject(h, object) != 0
}

func (wasmHost) selectorString(h uint32) string { return stringCall(importSelectorToString, h) }
func (wasmHost) selectorDrop(h uint32)          { importSelectorDrop(h) }

// cacheError reads a cache-error (12 bytes) at a.
func cacheError(a uint32) error {
	return &CacheError{Kind: CacheErrorKind(load8(a)), Message: loadString(a + 4)}
}

// cacheObjects reads result<list<own<object>>, cache-error> at the return
// area.
func cacheObjects() ([]uint32, error) {
	if load8(ret()) != 0 {
		return nil, cacheError(retAt(4))
	}
	p, n := load32(retAt(4)), load32(retAt(8))
	out := make([]uint32, n)
	for i := uint32(0); i < n; i++ {
		out[i] = load32(p + 4*i)
	}
	return out, nil
}

func (wasmHost) cacheGet(kind KindRef, namespace, name string) (uint32, bool, error) {
	top := mark()
	defer release(top)
	k0, k1, k2, k3, k4, k5, k6 := argKind(kind)
	n0, n1, n2 := argOptString(namespace)
	m0, m1 := argString(name)
	importCacheGet(k0, k1, k2, k3, k4, k5, k6, n0, n1, n2, m0, m1, ret())
	if load8(ret()) != 0 {
		return 0, false, cacheError(retAt(4))
	}
	if load8(retAt(4)) == 0 {
		return 0, false, nil
	}
	return load32(retAt(8)), true, nil
}

func (wasmHost) cacheList(kind KindRef, namespace, labelSelector string) ([]uint32, error) {
	top := mark()
	defer release(top)
	k0, k1, k2, k3, k4, k5, k6 := argKind(kind)
	n0, n1, n2 := argOptString(namespace)
	s0, s1, s2 := argOptString(labelSelector)
	importCacheList(k0, k1, k2, k3, k4, k5, k6, n0, n1, n2, s0, s1, s2, ret())
	return cacheObjects()
}

func (wasmHost) cacheByIndex(index, value string) ([]uint32, error) {
	top := mark()
	defer release(top)
	i0, i1 := argString(index)
	v0, v1 := argString(value)
	importCacheByIndex(i0, i1, v0, v1, ret())
	return cacheObjects()
}

// actionResult reads result<_, action-error> at the return area.
func actionResult() error {
	if load8(ret()) == 0 {
		return nil
	}
	return &ActionError{Kind: ActionErrorKind(load8(retAt(4))), Message: loadString(retAt(8))}
}

func (wasmHost) apply(objectJSON string, force bool, pre Preconditions) error {
	top := mark()
	defer release(top)
	p, n := argString(objectJSON)
	u0, u1, u2, r0, r1, r2 := argPre(pre)
	importApply(p, n, b2u(force), u0, u1, u2, r0, r1, r2, ret())
	return actionResult()
}

func (wasmHost) applyStatus(objectJSON string, pre Preconditions) error {
	top := mark()
	defer release(top)
	p, n := argString(objectJSON)
	u0, u1, u2, r0, r1, r2 := argPre(pre)
	importApplyStatus(p, n, u0, u1, u2, r0, r1, r2, ret())
	return actionResult()
}

func (wasmHost) patch(target ObjectRef, t PatchType, patch string, pre Preconditions) error {
	top := mark()
	defer release(top)
	// (object-ref 0..48, patch-type at 48, patch at 52, preconditions at 60)
	params := alloc(84, 4)
	putRef(params, target)
	store8(params+48, uint8(t))
	putString(params+52, patch)
	putPre(params+60, pre)
	importPatch(params, ret())
	return actionResult()
}

func (wasmHost) delete(target ObjectRef, p Propagation, pre Preconditions) error {
	top := mark()
	defer release(top)
	// (object-ref 0..48, propagation at 48, preconditions at 52)
	params := alloc(76, 4)
	putRef(params, target)
	store8(params+48, uint8(p))
	putPre(params+52, pre)
	importDelete(params, ret())
	return actionResult()
}

func (wasmHost) recordEvent(e EventRecord) error {
	top := mark()
	defer release(top)
	// event: regarding 0..48, regarding-uid at 48, event-type at 60,
	// reason at 64, note at 72.
	params := alloc(80, 4)
	putRef(params, e.Regarding)
	putOptString(params+48, e.RegardingUID)
	store8(params+60, uint8(e.Type))
	putString(params+64, e.Reason)
	putString(params+72, e.Note)
	importRecordEvent(params, ret())
	return actionResult()
}

func (wasmHost) logEnabled(level Level) bool { return importLogEnabled(uint32(level)) != 0 }

func (wasmHost) logWrite(level Level, message string, fields []Pair) {
	top := mark()
	defer release(top)
	m0, m1 := argString(message)
	f0, f1 := argPairs(fields)
	importLogWrite(uint32(level), m0, m1, f0, f1)
}

func (wasmHost) now() (int64, uint32) {
	importClockNow(ret())
	return int64(load64(ret())), load32(retAt(8))
}

func (wasmHost) nowRFC3339() string {
	top := mark()
	importClockNowRFC3339(ret())
	s := loadString(ret())
	release(top)
	return s
}

// ---- exports ---------------------------------------------------------------

// register(context: context) -> result<registration, string>: the context
// is three flat strings.
//
//go:wasmexport kubewasm:plugin/handler@0.2.0#register
func exportRegister(n0, n1, v0, v1, c0, c1 uint32) uint32 {
	ctx := Context{Name: stringAt(n0, n1), Version: stringAt(v0, v1), Config: stringAt(c0, c1)}
	resetArena() // the arguments are copied: the arena is free again
	reg, err := register(ctx)
	resetArena()
	r := alloc(28, 4)
	if err != nil {
		store8(r, 1)
		putString(r+4, err.Error())
		return r
	}
	store8(r, 0)
	putRegistration(r+4, reg)
	return r
}

//go:wasmexport cabi_post_kubewasm:plugin/handler@0.2.0#register
func postRegister(uint32) { resetArena() }

// handle(delta: delta) -> result<handled, handler-error>: the delta (84
// bytes) is passed by pointer; the result (24 bytes, 8-aligned) is
// returned by pointer.
//
//go:wasmexport kubewasm:plugin/handler@0.2.0#handle
func exportHandle(p uint32) uint32 {
	d := loadDelta(p)
	resetArena() // the delta is copied: the arena is free again
	handled, err := handle(&d)
	resetArena() // whatever the handler read is copied (or it panicked)
	r := alloc(24, 8)
	if err != nil {
		store8(r, 1)
		if IsRetry(err) {
			store8(r+8, 0)
		} else {
			store8(r+8, 1)
		}
		putString(r+12, err.Error())
		return r
	}
	store8(r, 0)
	if handled.requeue {
		store8(r+8, 1)
		store64(r+16, handled.ms)
	} else {
		store8(r+8, 0)
	}
	return r
}

//go:wasmexport cabi_post_kubewasm:plugin/handler@0.2.0#handle
func postHandle(uint32) { resetArena() }

// loadDelta reads a delta (84 bytes) at p; its object handles are owned.
func loadDelta(p uint32) Delta {
	d := Delta{
		Type:              DeltaType(load8(p)),
		Subscription:      load32(p + 4),
		Name:              loadString(p + 20),
		UID:               loadString(p + 28),
		ResourceVersion:   loadString(p + 36),
		Initial:           load8(p+60) != 0,
		FinalStateUnknown: load8(p+61) != 0,
		Attempt:           load32(p + 64),
		LastFailure:       loadFailure(p + 68),
	}
	d.Namespace, _ = loadOptString(p + 8)
	if load8(p+44) != 0 {
		d.Object = own(load32(p + 48))
	}
	if load8(p+52) != 0 {
		d.OldObject = own(load32(p + 56))
	}
	return d
}

// putRegistration stores a registration (24 bytes) at a.
func putRegistration(a uint32, r Registration) {
	subs := alloc(uint32(88*len(r.Subscriptions)), 4)
	for i, s := range r.Subscriptions {
		e := subs + uint32(88*i)
		putKind(e, s.Kind)
		putOptString(e+28, s.Namespace)
		putOptString(e+40, s.LabelSelector)
		putOptString(e+52, s.FieldSelector)
		ds := alloc(uint32(len(s.Deltas)), 1)
		for j, d := range s.Deltas {
			store8(ds+uint32(j), uint8(d))
		}
		store32(e+64, ds)
		store32(e+68, uint32(len(s.Deltas)))
		fs, fn := argStrings(s.Fields)
		store32(e+72, fs)
		store32(e+76, fn)
		if secs, ok := s.resync(); ok {
			store8(e+80, 1)
			store32(e+84, secs)
		} else {
			store8(e+80, 0)
		}
	}
	store32(a, subs)
	store32(a+4, uint32(len(r.Subscriptions)))
	ws := alloc(uint32(28*len(r.Writes)), 4)
	for i, w := range r.Writes {
		putKind(ws+uint32(28*i), w)
	}
	store32(a+8, ws)
	store32(a+12, uint32(len(r.Writes)))
	ix := alloc(uint32(44*len(r.Indexes)), 4)
	for i, x := range r.Indexes {
		e := ix + uint32(44*i)
		putString(e, x.Name)
		putKind(e+8, x.Kind)
		putString(e+36, x.Pointer)
	}
	store32(a+16, ix)
	store32(a+20, uint32(len(r.Indexes)))
}
