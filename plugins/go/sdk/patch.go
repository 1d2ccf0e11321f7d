package kubewasm

import (
	"bytes"
	"encoding/json"
	"strings"
)

// EscapePointer escapes one reference token of a JSON pointer (RFC 6901):
// `~` becomes `~0`, `/` becomes `~1` (`example.com/zone` →
// `example.com~1zone`).
func EscapePointer(segment string) string {
	return strings.ReplaceAll(strings.ReplaceAll(segment, "~", "~0"), "/", "~1")
}

// Pointer is the JSON pointer of unescaped segments:
// Pointer("metadata", "labels", "app.kubernetes.io/name") is
// `/metadata/labels/app.kubernetes.io~1name`; no segments is "" (the whole
// document).
func Pointer(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(EscapePointer(s))
	}
	return b.String()
}

// JSONPatch is an RFC 6902 JSON patch: operations applied in order, all or
// nothing. Paths are JSON pointers, already escaped (build them with
// Pointer when a segment may hold `/` or `~`); `-` as the last segment of
// an `add` appends to an array. The zero value has no operations; every
// method returns a new patch (the receiver is not changed):
//
//	p := kubewasm.NewJSONPatch().
//		Test("/metadata/resourceVersion", "42").
//		Add(kubewasm.Pointer("metadata", "annotations", "example.com/owner"), "me").
//		Remove("/metadata/labels/stale")
//
// Send it with PatchJSON. Values are encoded with encoding/json (HTML
// characters not escaped) when the patch is encoded.
type JSONPatch struct{ ops []PatchOp }

// PatchOp is one operation of a JSONPatch.
type PatchOp struct {
	Op, Path string
	// Value is encoded for every op but `remove`, even when nil (null).
	Value any
}

// NewJSONPatch is a patch with no operations yet.
func NewJSONPatch() JSONPatch { return JSONPatch{} }

func (p JSONPatch) op(op, path string, value any) JSONPatch {
	ops := make([]PatchOp, len(p.ops), len(p.ops)+1)
	copy(ops, p.ops)
	return JSONPatch{ops: append(ops, PatchOp{Op: op, Path: path, Value: value})}
}

// Add sets path (creating an object member, or inserting into an array at
// that index, `-` appending).
func (p JSONPatch) Add(path string, value any) JSONPatch { return p.op("add", path, value) }

// Remove deletes path, which must exist.
func (p JSONPatch) Remove(path string) JSONPatch { return p.op("remove", path, nil) }

// Replace sets path, which must exist.
func (p JSONPatch) Replace(path string, value any) JSONPatch { return p.op("replace", path, value) }

// Test makes the whole patch fail unless path equals value.
func (p JSONPatch) Test(path string, value any) JSONPatch { return p.op("test", path, value) }

// Len is the number of operations.
func (p JSONPatch) Len() int { return len(p.ops) }

// IsEmpty reports whether there are no operations.
func (p JSONPatch) IsEmpty() bool { return len(p.ops) == 0 }

// Ops returns a copy of the operations.
func (p JSONPatch) Ops() []PatchOp { return append([]PatchOp(nil), p.ops...) }

// Encode is the compact JSON text sent: `[{"op":..,"path":..,"value":..},
// ...]`, `[]` for no operations. A value encoding/json cannot encode is a
// permanent error.
func (p JSONPatch) Encode() (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteByte('[')
	for i, op := range p.ops {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"op":`)
		_ = enc.Encode(op.Op)
		trimNewline(&b)
		b.WriteString(`,"path":`)
		_ = enc.Encode(op.Path)
		trimNewline(&b)
		if op.Op != "remove" {
			b.WriteString(`,"value":`)
			if err := enc.Encode(op.Value); err != nil {
				return "", Permanentf("cannot encode JSON patch value at %s: %v", op.Path, err)
			}
			trimNewline(&b)
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.String(), nil
}

func trimNewline(b *bytes.Buffer) {
	if n := b.Len(); n > 0 && b.Bytes()[n-1] == '\n' {
		b.Truncate(n - 1)
	}
}

// MarshalJSON is Encode, for embedding a patch in other JSON.
func (p JSONPatch) MarshalJSON() ([]byte, error) {
	s, err := p.Encode()
	return []byte(s), err
}

// String is Encode's text, or `!(error)` when a value cannot be encoded.
func (p JSONPatch) String() string {
	s, err := p.Encode()
	if err != nil {
		return "!(" + err.Error() + ")"
	}
	return s
}
