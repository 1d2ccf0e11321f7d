//go:build !wasip1

package main

// Native unit tests through the SDK's fake host (`go test
// ./config-replicator`): no WebAssembly, no host.

import (
	"reflect"
	"testing"

	kw "kubewasm/plugins/sdk"
)

func namespace(name, labels string) string {
	return `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `","labels":` + labels + `}}`
}

const source = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"default",
	"labels":{"kubewasm.io/replicate":"true"}},"data":{"color":"blue"}}`

func copyIn(ns, by string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"` + ns + `",
	"labels":{"kubewasm.io/replica":"true"},
	"annotations":{"kubewasm.io/replica-of":"default/settings","kubewasm.io/replicated-by":"` + by + `"}}}`
}

func load(t *testing.T) *kw.FakeHost {
	f := kw.NewFakeHost(t)
	f.Put(namespace("default", `{}`)).Put(namespace("team-a", `{"team":"a"}`)).Put(namespace("team-b", `{"team":"b"}`))
	if err := f.Load("replicator", `{"namespaceSelector": "team"}`); err != nil {
		t.Fatal(err)
	}
	return f
}

func handle(t *testing.T, f *kw.FakeHost, d *kw.Delta) {
	t.Helper()
	if h, err := f.Handle(d); err != nil || h != kw.Done {
		t.Fatal(h, err)
	}
}

func want(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("actions:\n%q\nwant:\n%q", got, want)
	}
}

func TestASourceIsCopiedIntoEachMatchingNamespace(t *testing.T) {
	f := load(t)
	d := f.Added(source)
	if d.Subscription != configMaps {
		t.Fatal(d.Subscription)
	}
	handle(t, f, d)
	actions := f.TakeActions()
	var lines []string
	for _, a := range actions {
		lines = append(lines, a.String())
	}
	want(t, lines, "apply ConfigMap team-a/settings force", "apply ConfigMap team-b/settings force")
	meta := actions[0].Object["metadata"].(map[string]any)
	if meta["annotations"].(map[string]any)["kubewasm.io/replica-of"] != "default/settings" ||
		meta["labels"].(map[string]any)["kubewasm.io/replica"] != "true" ||
		actions[0].Object["data"].(map[string]any)["color"] != "blue" {
		t.Fatalf("%v", actions[0].Object)
	}
}

func TestACopyWhoseSourceIsGoneIsDeleted(t *testing.T) {
	f := load(t)
	f.Put(source).Put(copyIn("team-b", "replicator"))
	// The source goes: each of this replicator's copies is deleted, guarded by its uid.
	handle(t, f, f.Deleted(source))
	want(t, f.TakeActionLines(), "delete ConfigMap team-b/settings background uid=uid-team-b-settings")
	// A copy seen later with its source gone is an orphan; another
	// replicator's copy is left alone.
	handle(t, f, f.Resync(copyIn("team-a", "replicator")))
	handle(t, f, f.Resync(copyIn("team-c", "someone-else")))
	want(t, f.TakeActionLines(), "delete ConfigMap team-a/settings background uid=uid-team-a-settings")
	logs := f.Logs()
	if got := logs[len(logs)-1].String(); got != "info orphan copy deleted copy=team-a/settings source=default/settings" {
		t.Fatal(got)
	}
}
