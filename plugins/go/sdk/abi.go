//go:build wasip1

package kubewasm

// The component model's canonical ABI for kubewasm:plugin@0.1.0, written by
// hand for Go's GOOS=wasip1 (64-bit pointers, so generated bindings whose
// structs mirror the 32-bit memory layout cannot be used): imports are
// //go:wasmimport functions over flat i32 parameters, exports are
// //go:wasmexport functions, and memory the host writes into (arguments of
// exports, results of imports) comes from an arena outside the Go heap:
// cabi_realloc runs while the host is lowering values, when the guest may
// not call out (a Go allocation can reach clock_time_get), so it must not
// allocate. The arena is reset after each export call (post-return). The
// byte offsets below follow the canonical ABI layout of each WIT type.

import (
	"unsafe"
)

const arenaSize = 4 << 20

var (
	arena    [arenaSize / 8]uint64 // 8-aligned
	arenaTop uint32
	// The WASI adapter's own allocations (its state), never freed.
	adapterArena [256 << 10 / 8]uint64
	adapterTop   uint32
	// Return area for imports: results are read right after each call.
	retArea [64]uint64
)

func addr(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }
func at(a uint32) unsafe.Pointer   { return unsafe.Pointer(uintptr(a)) }

func load8(a uint32) uint8   { return *(*uint8)(at(a)) }
func load32(a uint32) uint32 { return *(*uint32)(at(a)) }
func load64(a uint32) uint64 { return *(*uint64)(at(a)) }

func store8(a uint32, v uint8)   { *(*uint8)(at(a)) = v }
func store32(a uint32, v uint32) { *(*uint32)(at(a)) = v }

// loadString copies the string (ptr, len) stored at a into the Go heap.
func loadString(a uint32) string {
	p, n := load32(a), load32(a+4)
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(at(p)), n))
}

// loadOptString reads an option<string> at a.
func loadOptString(a uint32) *string {
	if load8(a) == 0 {
		return nil
	}
	s := loadString(a + 4)
	return &s
}

func bump(base uint32, top *uint32, limit uint32, align, size uint32) uint32 {
	start := (base + *top + align - 1) &^ (align - 1)
	end := start + size
	if end > base+limit {
		return 0
	}
	*top = end - base
	return start
}

// alloc takes memory from the arena (valid until the export returns).
func alloc(size, align uint32) uint32 {
	if align == 0 {
		align = 1
	}
	p := bump(addr(unsafe.Pointer(&arena[0])), &arenaTop, arenaSize, align, size)
	if p == 0 && size > 0 {
		panic("kubewasm: arena exhausted")
	}
	return p
}

func resetArena() { arenaTop = 0 }

//go:wasmexport cabi_realloc
//go:nosplit
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	if old != 0 && newSize <= oldSize {
		return old
	}
	p := bump(addr(unsafe.Pointer(&arena[0])), &arenaTop, arenaSize, align, newSize)
	if p == 0 {
		return 0 // the host traps on an out-of-bounds result
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
	if p != 0 && old != 0 && oldSize > 0 {
		copy(unsafe.Slice((*byte)(at(p)), oldSize), unsafe.Slice((*byte)(at(old)), oldSize))
	}
	return p
}

// putString copies s into the arena and stores (ptr, len) at a.
func putString(a uint32, s string) {
	p := alloc(uint32(len(s)), 1)
	if len(s) > 0 {
		copy(unsafe.Slice((*byte)(at(p)), len(s)), s)
	}
	store32(a, p)
	store32(a+4, uint32(len(s)))
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

// argKind: kind-ref as seven flat parameters.
func argKind(k KindRef) (d, a, b, c, e, f, g uint32) {
	if k.Resource != "" {
		a, b = argString(k.Resource)
		return 1, a, b, 0, 0, 0, 0
	}
	a, b = argString(k.Group)
	c, e = argString(k.Version)
	f, g = argString(k.Kind)
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
	putString(a+20, k.Kind)
}

func putOptString(a uint32, s string) {
	if s == "" {
		store8(a, 0)
		return
	}
	store8(a, 1)
	putString(a+4, s)
}

func ret() uint32 { return addr(unsafe.Pointer(&retArea[0])) }

// ---- imports ---------------------------------------------------------------

//go:wasmimport kubewasm:plugin/types@0.1.0 [method]object.meta
func objectMeta(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.1.0 [method]object.field
func objectField(self, ptr, n, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.1.0 [method]object.to-json
func objectToJSON(self, ret uint32)

//go:wasmimport kubewasm:plugin/types@0.1.0 [resource-drop]object
func objectDrop(self uint32)

//go:wasmimport kubewasm:plugin/cache@0.1.0 get
func cacheGet(k0, k1, k2, k3, k4, k5, k6, ns0, ns1, ns2, name0, name1, ret uint32)

//go:wasmimport kubewasm:plugin/cache@0.1.0 list
func cacheList(k0, k1, k2, k3, k4, k5, k6, ns0, ns1, ns2, s0, s1, s2, ret uint32)

//go:wasmimport kubewasm:plugin/cache@0.1.0 by-index
func cacheByIndex(i0, i1, v0, v1, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.1.0 apply
func actionApply(p, n, force, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.1.0 apply-status
func actionApplyStatus(p, n, ret uint32)

// patch and record-event have more than 16 flat parameters: they are
// passed as one pointer to the parameter tuple in memory (see putRef).
//
//go:wasmimport kubewasm:plugin/actions@0.1.0 patch
func actionPatch(params, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.1.0 delete
func actionDelete(k0, k1, k2, k3, k4, k5, k6, ns0, ns1, ns2, name0, name1, uid0, uid1, uid2, prop, ret uint32)

//go:wasmimport kubewasm:plugin/actions@0.1.0 record-event
func actionEvent(params, ret uint32)

//go:wasmimport kubewasm:plugin/log@0.1.0 enabled
func logEnabled(level uint32) uint32

//go:wasmimport kubewasm:plugin/log@0.1.0 write
func logWrite(level, m0, m1, f0, f1 uint32)

//go:wasmimport kubewasm:plugin/clock@0.1.0 now
func clockNow(ret uint32)

//go:wasmimport kubewasm:plugin/clock@0.1.0 now-rfc3339
func clockNowRFC3339(ret uint32)

// ---- exports ---------------------------------------------------------------

//go:wasmexport kubewasm:plugin/handler@0.1.0#register
func exportRegister(p, n uint32) uint32 {
	config := ""
	if n > 0 {
		config = string(unsafe.Slice((*byte)(at(p)), n))
	}
	r := alloc(28, 4)
	reg, err := register(config)
	if err != nil {
		store8(r, 1)
		putString(r+4, err.Error())
		return r
	}
	store8(r, 0)
	putRegistration(r+4, reg)
	return r
}

//go:wasmexport cabi_post_kubewasm:plugin/handler@0.1.0#register
func postRegister(uint32) { resetArena() }

//go:wasmexport kubewasm:plugin/handler@0.1.0#handle
func exportHandle(p uint32) uint32 {
	d := loadDelta(p)
	err := handle(&d)
	dropOwned()
	r := alloc(16, 4)
	if err == nil {
		store8(r, 0)
		return r
	}
	store8(r, 1)
	if IsRetry(err) {
		store8(r+4, 0)
	} else {
		store8(r+4, 1)
	}
	putString(r+8, err.Error())
	return r
}

//go:wasmexport cabi_post_kubewasm:plugin/handler@0.1.0#handle
func postHandle(uint32) { resetArena() }

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
		fs := alloc(uint32(8*len(s.Fields)), 4)
		for j, f := range s.Fields {
			putString(fs+uint32(8*j), f)
		}
		store32(e+72, fs)
		store32(e+76, uint32(len(s.Fields)))
		if s.ResyncSeconds > 0 {
			store8(e+80, 1)
			store32(e+84, s.ResyncSeconds)
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

// Handles the guest owns during one handle call, dropped at its end.
var owned []uint32

func own(h uint32) *Object {
	owned = append(owned, h)
	return &Object{handle: h}
}

func dropOwned() {
	for _, h := range owned {
		objectDrop(h)
	}
	owned = owned[:0]
}

func loadMeta(m uint32) ObjectMeta {
	meta := ObjectMeta{
		APIVersion:      loadString(m),
		Kind:            loadString(m + 8),
		Name:            loadString(m + 28),
		UID:             loadString(m + 36),
		ResourceVersion: loadString(m + 44),
	}
	if ns := loadOptString(m + 16); ns != nil {
		meta.Namespace = *ns
	}
	if load8(m+56) != 0 {
		g := int64(load64(m + 64))
		meta.Generation = &g
	}
	meta.Labels = loadPairs(m + 72)
	meta.Annotations = loadPairs(m + 80)
	refs, n := load32(m+88), load32(m+92)
	for i := uint32(0); i < n; i++ {
		e := refs + 36*i
		meta.OwnerReferences = append(meta.OwnerReferences, OwnerReference{
			APIVersion: loadString(e),
			Kind:       loadString(e + 8),
			Name:       loadString(e + 16),
			UID:        loadString(e + 24),
			Controller: load8(e+32) != 0,
		})
	}
	meta.CreationTimestamp = loadOptString(m + 96)
	meta.DeletionTimestamp = loadOptString(m + 108)
	return meta
}

func loadPairs(a uint32) []Pair {
	p, n := load32(a), load32(a+4)
	out := make([]Pair, n)
	for i := uint32(0); i < n; i++ {
		out[i] = Pair{Key: loadString(p + 16*i), Value: loadString(p + 16*i + 8)}
	}
	return out
}

func loadDelta(p uint32) Delta {
	d := Delta{
		Type:              DeltaType(load8(p)),
		Subscription:      load32(p + 4),
		Kind:              GVK{Group: loadString(p + 8), Version: loadString(p + 16), Kind: loadString(p + 24)},
		Initial:           load8(p+176) != 0,
		FinalStateUnknown: load8(p+177) != 0,
	}
	if load8(p+32) != 0 {
		m := loadMeta(p + 40)
		d.Meta = &m
	}
	if load8(p+160) != 0 {
		d.Object = own(load32(p + 164))
	}
	if load8(p+168) != 0 {
		d.OldObject = own(load32(p + 172))
	}
	return d
}

// cacheObjects reads result<list<own<object>>, cache-error> at the return area.
func cacheObjects() ([]*Object, error) {
	r := ret()
	if load8(r) != 0 {
		return nil, cacheError(r + 4)
	}
	p, n := load32(r+4), load32(r+8)
	out := make([]*Object, n)
	for i := uint32(0); i < n; i++ {
		out[i] = own(load32(p + 4*i))
	}
	return out, nil
}

func cacheError(a uint32) error {
	msg := loadString(a + 4)
	switch load8(a) {
	case 0:
		return Permanent("cache read refused, kind not subscribed: " + msg)
	case 1:
		return Permanent("cache read refused, unknown index: " + msg)
	default:
		return Permanent("cache read refused, invalid selector: " + msg)
	}
}

// actionResult reads result<_, action-error> at the return area.
func actionResult() error {
	r := ret()
	if load8(r) == 0 {
		return nil
	}
	msg := loadString(r + 8)
	if load8(r+4) == 0 {
		return Permanent("action refused, kind not declared in writes: " + msg)
	}
	return Permanent("action refused as invalid: " + msg)
}

// putRef stores an object-ref (60 bytes: kind-ref, namespace, name, uid) at a.
func putRef(a uint32, t ObjectRef) {
	putKind(a, t.Kind)
	putOptString(a+28, t.Namespace)
	putString(a+40, t.Name)
	putOptString(a+48, t.UID)
}

// argRef: object-ref as fifteen flat parameters.
func argRef(t ObjectRef) (k [7]uint32, ns [3]uint32, name [2]uint32, uid [3]uint32) {
	k[0], k[1], k[2], k[3], k[4], k[5], k[6] = argKind(t.Kind)
	ns[0], ns[1], ns[2] = argOptString(t.Namespace)
	name[0], name[1] = argString(t.Name)
	uid[0], uid[1], uid[2] = argOptString(t.UID)
	return
}
