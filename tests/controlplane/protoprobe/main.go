// Command protoprobe encodes Kubernetes objects with the real apimachinery
// serializers (the version go.mod pins), for kubewasm's protobuf
// transcoder (host/src/proto). Two modes:
//
//	protoprobe schema
//
// writes the field table host/src/proto/schema.txt is generated from: for
// every built-in kind of the scheme the API server serves, the kind, and for
// every struct reachable from it, each field's protobuf number (from the Go
// type's protobuf struct tag, the one go-to-protobuf wrote generated.proto
// from), JSON name, omitempty/omitzero/inline options (from the json tag)
// and Go type. These are what the JSON encoding follows and the .proto
// files do not say.
//
//	protoprobe
//
//	protoprobe fuzz SEED N
//
// fills N objects of every kind the schema table names with random values
// (apimachinery's round-trip fuzzer: randfill with meta/v1's fill
// functions, and a few more so every value has a JSON form) and writes one
// answer line per object, as below.
//
//	protoprobe
//
// reads JSON objects on stdin and writes one JSON line per object, in
// order: its protobuf encoding (runtime/serializer/protobuf, as the API
// server writes it, base64) and the JSON encoding
// (runtime/serializer/json) of the object decoded back from that protobuf,
// which is what an API server that stores it (as protobuf, in etcd) serves;
// "direct" is the JSON encoding of the object decoded from the input:
//
//	{"ok": true, "kind": "v1/Pod", "proto": "azhzAAo...", "json": "{...}", "direct": "{...}"}
//	{"ok": false, "error": "no kind \"Foo\" is registered ..."}
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregv1beta1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1beta1"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "protoprobe: "+format+"\n", args...)
	os.Exit(2)
}

// newScheme is client-go's scheme (every group of k8s.io/api) plus the
// API server's own extension and aggregation groups.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		scheme.AddToScheme, apiextv1.AddToScheme, apiextv1beta1.AddToScheme,
		apiregv1.AddToScheme, apiregv1beta1.AddToScheme,
	} {
		if err := add(s); err != nil {
			fail("building the scheme: %v", err)
		}
	}
	return s
}

func main() {
	s := newScheme()
	if len(os.Args) == 2 && os.Args[1] == "schema" {
		writeSchema(s)
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "fuzz" {
		seed, err1 := strconv.ParseInt(os.Args[2], 10, 64)
		n, err2 := strconv.Atoi(os.Args[3])
		if err1 != nil || err2 != nil {
			fail("usage: protoprobe fuzz SEED N")
		}
		fuzz(s, seed, n)
		return
	}
	if len(os.Args) != 1 {
		fail("usage: protoprobe [schema | fuzz SEED N]")
	}
	probe(s)
}

type answer struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Kind   string `json:"kind,omitempty"`
	Proto  []byte `json:"proto,omitempty"`
	JSON   string `json:"json,omitempty"`
	Direct string `json:"direct,omitempty"`
}

func probe(s *runtime.Scheme) {
	js := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, s, s, jsonserializer.SerializerOptions{})
	pb := protobuf.NewSerializer(s, s)
	in := json.NewDecoder(bufio.NewReaderSize(os.Stdin, 1<<20))
	w := bufio.NewWriter(os.Stdout)
	out := json.NewEncoder(w)
	out.SetEscapeHTML(false)
	for {
		var raw json.RawMessage
		if err := in.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			fail("reading stdin: %v", err)
		}
		if err := out.Encode(encode(js, pb, raw)); err != nil {
			fail("writing stdout: %v", err)
		}
	}
	if err := w.Flush(); err != nil {
		fail("writing stdout: %v", err)
	}
}

func encode(js *jsonserializer.Serializer, pb *protobuf.Serializer, raw []byte) answer {
	obj, gvk, err := js.Decode(raw, nil, nil)
	if err != nil {
		return answer{Error: err.Error()}
	}
	return encodeObject(js, pb, obj, *gvk)
}

func encodeObject(js *jsonserializer.Serializer, pb *protobuf.Serializer, obj runtime.Object, gvk schema.GroupVersionKind) answer {
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var p, direct, back bytes.Buffer
	if err := pb.Encode(obj, &p); err != nil {
		return answer{Error: "protobuf encoding: " + err.Error()}
	}
	if err := js.Encode(obj, &direct); err != nil {
		return answer{Kind: gvkText(gvk), Error: "json encoding: " + err.Error()}
	}
	again, _, err := pb.Decode(p.Bytes(), nil, nil)
	if err != nil {
		return answer{Error: "protobuf decoding: " + err.Error()}
	}
	again.GetObjectKind().SetGroupVersionKind(gvk)
	if err := js.Encode(again, &back); err != nil {
		return answer{Error: "json encoding: " + err.Error()}
	}
	return answer{
		OK:     true,
		Kind:   gvkText(gvk),
		Proto:  p.Bytes(),
		JSON:   strings.TrimSuffix(back.String(), "\n"),
		Direct: strings.TrimSuffix(direct.String(), "\n"),
	}
}

// protoMessage is what go-to-protobuf's generated types implement.
type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

var (
	protoType     = reflect.TypeOf((*protoMessage)(nil)).Elem()
	marshalerType = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	bytesType     = reflect.TypeOf([]byte(nil))
)

// messageName is the protobuf message go-to-protobuf names after a Go
// type: its package path with dots, then its name.
func messageName(t reflect.Type) string {
	return strings.ReplaceAll(t.PkgPath(), "/", ".") + "." + t.Name()
}

func isCustom(t reflect.Type) bool {
	return t.Name() != "" && (t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType))
}

// typeExpr writes a field's Go type the way the table spells it: `*` for a
// pointer, `[]` for a slice, `map[K]` for a map, `!Name` for a type with
// its own MarshalJSON, `@Name` for a named slice that protobuf wraps in a
// message of its own (repeated field 1), a message name, or a scalar.
func typeExpr(t reflect.Type, queue *[]reflect.Type) string {
	switch {
	case t == bytesType:
		return "bytes"
	case t.Kind() == reflect.Pointer:
		return "*" + typeExpr(t.Elem(), queue)
	case isCustom(t):
		*queue = append(*queue, t)
		return "!" + messageName(t)
	case t.Kind() == reflect.Slice && t.Name() != "" && reflect.PointerTo(t).Implements(protoType):
		return "@" + typeExpr(t.Elem(), queue)
	case t.Kind() == reflect.Slice:
		return "[]" + typeExpr(t.Elem(), queue)
	case t.Kind() == reflect.Map:
		return "map[" + typeExpr(t.Key(), queue) + "]" + typeExpr(t.Elem(), queue)
	case t.Kind() == reflect.Struct:
		*queue = append(*queue, t)
		return messageName(t)
	case t.Kind() == reflect.Interface:
		return "interface"
	default:
		return t.Kind().String()
	}
}

type field struct {
	number, json, flags, typ string
}

// fields lists a struct's fields as encoding/json sees them: skipped
// (`json:"-"`) fields left out, unexported ones too.
func fields(t reflect.Type, queue *[]reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		parts := strings.Split(tag, ",")
		name, flags := parts[0], ""
		for _, opt := range parts[1:] {
			switch opt {
			case "omitempty":
				flags += "o"
			case "omitzero":
				flags += "z"
			case "inline":
				flags += "i"
			case "string":
				flags += "s"
			}
		}
		if f.Anonymous && name == "" && !strings.Contains(flags, "i") && f.Type.Kind() == reflect.Struct {
			flags += "i"
		}
		if name == "" && !strings.Contains(flags, "i") {
			name = f.Name
		}
		if name == "" {
			name = "-"
		}
		if flags == "" {
			flags = "-"
		}
		number := "-"
		if pt := f.Tag.Get("protobuf"); pt != "" && pt != "-" {
			number = strings.Split(pt, ",")[1]
		}
		out = append(out, field{number, name, flags, typeExpr(f.Type, queue)})
	}
	return out
}

// protoKinds are the kinds the table holds: every versioned kind with a
// protobuf encoding, sorted.
func protoKinds(s *runtime.Scheme) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for gvk, t := range s.AllKnownTypes() {
		// The options, Status and WatchEvent of meta/v1 are registered in
		// every group; they are not kinds anyone lists or watches. Status
		// as v1 stays: the object of a watch's ERROR event.
		meta := t.PkgPath() == "k8s.io/apimachinery/pkg/apis/meta/v1"
		if gvk.Version == runtime.APIVersionInternal || !reflect.PointerTo(t).Implements(protoType) ||
			(meta && (gvk.GroupVersion().String() != "v1" || gvk.Kind != "Status")) {
			continue
		}
		out = append(out, gvk)
	}
	sort.Slice(out, func(i, j int) bool { return gvkText(out[i]) < gvkText(out[j]) })
	return out
}

func writeSchema(s *runtime.Scheme) {
	var kinds []string
	var queue []reflect.Type
	known := s.AllKnownTypes()
	for _, gvk := range protoKinds(s) {
		t := known[gvk]
		kinds = append(kinds, fmt.Sprintf("K %s %s", gvkText(gvk), messageName(t)))
		queue = append(queue, t)
	}
	seen := map[reflect.Type]bool{}
	var messages []string
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		if seen[t] {
			continue
		}
		seen[t] = true
		if isCustom(t) {
			// Written by their own MarshalJSON: the transcoder knows each by name.
			messages = append(messages, "C "+messageName(t))
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "M %s", messageName(t))
		for _, f := range fields(t, &queue) {
			fmt.Fprintf(&b, "\n  %s %s %s %s", f.number, f.json, f.flags, f.typ)
		}
		messages = append(messages, b.String())
	}
	sort.Strings(messages)
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, "# Generated by tests/controlplane/protoprobe (protoprobe schema): do not edit.")
	fmt.Fprintln(w, "# K group/version/Kind message | M message, then its fields in Go order: number json-name flags go-type")
	fmt.Fprintln(w, "# flags: o omitempty, z omitzero, i inline, s string, - none; C: a type with its own MarshalJSON")
	for _, k := range kinds {
		fmt.Fprintln(w, k)
	}
	for _, m := range messages {
		fmt.Fprintln(w, m)
	}
	if err := w.Flush(); err != nil {
		fail("writing stdout: %v", err)
	}
}

func gvkText(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + "/" + gvk.Kind
}
