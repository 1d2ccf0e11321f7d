package kubewasm

import (
	"math"
	"testing"
)

func TestPointerEscaping(t *testing.T) {
	for _, c := range [][2]string{
		{EscapePointer("a/b~c"), "a~1b~0c"},
		{EscapePointer("~1"), "~01"},
		{Pointer("metadata", "annotations", "k/v"), "/metadata/annotations/k~1v"},
		{Pointer(), ""},
		{Pointer(""), "/"},
	} {
		if c[0] != c[1] {
			t.Errorf("got %q, want %q", c[0], c[1])
		}
	}
}

func TestJSONPatchOpsInOrder(t *testing.T) {
	p := NewJSONPatch().
		Add("/a/-", 1).
		Replace("/b", map[string]any{"c": []bool{true}}).
		Remove("/d").
		Test("/e", nil).
		Add("/f", false).
		Add("/g", "<&>")
	if p.Len() != 6 || p.IsEmpty() || !NewJSONPatch().IsEmpty() {
		t.Fatalf("len %d", p.Len())
	}
	want := `[{"op":"add","path":"/a/-","value":1},{"op":"replace","path":"/b","value":{"c":[true]}},` +
		`{"op":"remove","path":"/d"},{"op":"test","path":"/e","value":null},` +
		`{"op":"add","path":"/f","value":false},{"op":"add","path":"/g","value":"<&>"}]`
	if got := p.String(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if b, err := p.MarshalJSON(); err != nil || string(b) != want {
		t.Fatalf("MarshalJSON: %s %v", b, err)
	}
	if got, _ := Marshal(p); got != want {
		t.Fatalf("Marshal: %s", got)
	}
	if got := NewJSONPatch().String(); got != "[]" {
		t.Fatalf("empty: %s", got)
	}
	if ops := p.Ops(); len(ops) != 6 || ops[2].Op != "remove" {
		t.Fatalf("ops %v", ops)
	}
}

func TestJSONPatchBuildersDoNotAlias(t *testing.T) {
	base := NewJSONPatch().Add("/a", 1)
	x := base.Add("/x", 1)
	y := base.Add("/y", 2)
	if base.Len() != 1 || x.String() != `[{"op":"add","path":"/a","value":1},{"op":"add","path":"/x","value":1}]` ||
		y.String() != `[{"op":"add","path":"/a","value":1},{"op":"add","path":"/y","value":2}]` {
		t.Fatalf("base %s x %s y %s", base, x, y)
	}
}

func TestJSONPatchEncodeError(t *testing.T) {
	_, err := NewJSONPatch().Add("/a", math.Inf(1)).Encode()
	if err == nil || IsRetry(err) {
		t.Fatalf("want a permanent error, got %v", err)
	}
}
