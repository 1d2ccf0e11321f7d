package main

import (
	"bufio"
	"encoding/json"
	"math/rand"
	"os"

	"sigs.k8s.io/randfill"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// jsonValues are what an embedded apiextensions JSON value holds.
var jsonValues = []string{`null`, `1`, `-2.5e-7`, `"a<b>&c"`, `[1,"x",{"k":true}]`, `{"a":{"b":[]},"c":"\u2028"}`, `true`}

// propsDepth bounds the JSONSchemaProps recursion (each has a dozen
// schema-valued fields; filled freely they grow without end).
var propsDepth int

// extraFuncs make every filled value one that has a JSON form: an
// IntOrString of a real type, embedded JSON that is JSON.
func extraFuncs(codecs serializer.CodecFactory) []interface{} {
	return []interface{}{
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31() - 1<<30)
			} else {
				*v = intstr.FromString(c.String(0))
			}
		},
		func(v *apiextv1.JSON, c randfill.Continue) {
			v.Raw = []byte(jsonValues[c.Intn(len(jsonValues))])
		},
		func(v *apiextv1beta1.JSON, c randfill.Continue) {
			v.Raw = []byte(jsonValues[c.Intn(len(jsonValues))])
		},
		func(v *apiextv1.JSONSchemaProps, c randfill.Continue) {
			if propsDepth >= 2 {
				v.Type = "string"
				return
			}
			propsDepth++
			c.FillNoCustom(v)
			propsDepth--
		},
		func(v *apiextv1beta1.JSONSchemaProps, c randfill.Continue) {
			if propsDepth >= 2 {
				v.Type = "string"
				return
			}
			propsDepth++
			c.FillNoCustom(v)
			propsDepth--
		},
	}
}

// fuzz writes n random objects of every kind of the table.
func fuzz(s *runtime.Scheme, seed int64, n int) {
	codecs := serializer.NewCodecFactory(s)
	funcs := fuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, extraFuncs)
	filler := fuzzer.FuzzerFor(funcs, rand.NewSource(seed), codecs).NumElements(0, 3).MaxDepth(24)
	js := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, s, s, jsonserializer.SerializerOptions{})
	pb := protobuf.NewSerializer(s, s)
	w := bufio.NewWriter(os.Stdout)
	out := json.NewEncoder(w)
	out.SetEscapeHTML(false)
	for _, gvk := range protoKinds(s) {
		for i := 0; i < n; i++ {
			obj, err := s.New(gvk)
			if err != nil {
				fail("%s: %v", gvkText(gvk), err)
			}
			filler.Fill(obj)
			a := encodeObject(js, pb, obj, gvk)
			a.Kind = gvkText(gvk)
			if err := out.Encode(a); err != nil {
				fail("writing stdout: %v", err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		fail("writing stdout: %v", err)
	}
}
