//go:build !wasip1

// A unit test of the hello plugin through the SDK's fake host (`go test
// ./...`): no WebAssembly, no host. kw.NewFakeHost(t) stands in for the
// host: put objects into its cache, Load the plugin, hand it deltas, then
// check the actions it emitted (TakeActionLines, TakeActions) and what it
// logged (TakeLogs). See `go doc ./sdk FakeHost`.
package main

import (
	"reflect"
	"testing"

	kw "{{name}}/sdk"
)

func TestAnnotatesEachConfigMap(t *testing.T) {
	f := kw.NewFakeHost(t)
	if err := f.Load("{{name}}", "{}"); err != nil {
		t.Fatal(err)
	}
	d := f.Added(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"greeting","namespace":"demo"}}`)
	if _, err := f.Handle(d); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`patch ConfigMap demo/greeting merge {"metadata":{"annotations":{"kubewasm.io/hello":"{{name}}"}}} uid=uid-demo-greeting`,
	}
	if got := f.TakeActionLines(); !reflect.DeepEqual(got, want) {
		t.Fatalf("actions:\n%q\nwant:\n%q", got, want)
	}
	if logs := f.TakeLogs(); len(logs) != 1 || logs[0].String() != "info hello name=greeting" {
		t.Fatalf("logs: %v", logs)
	}
}
