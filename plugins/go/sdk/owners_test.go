package kubewasm

import (
	"encoding/json"
	"testing"
)

func deploymentRef(uid string) OwnerReference { return ControllerOf(Deployment.GVK, "web", uid) }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOwnerReferences(t *testing.T) {
	r := deploymentRef("d-1")
	if got := jsonOf(t, r.JSON()); got != `{"apiVersion":"apps/v1","blockOwnerDeletion":true,"controller":true,"kind":"Deployment","name":"web","uid":"d-1"}` {
		t.Fatal(got)
	}
	if got := jsonOf(t, r); got != `{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-1","controller":true,"blockOwnerDeletion":true}` {
		t.Fatal(got)
	}
	if !r.Is(Deployment) || r.Is(ReplicaSet) {
		t.Fatal("Is")
	}
	plain := OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "c"}
	if got := jsonOf(t, plain.JSON()); got != `{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"c"}` {
		t.Fatal(got)
	}
	refs := []OwnerReference{plain, {APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-1", Controller: true}}
	if o, ok := FindOwnerIn(refs, ReplicaSet); !ok || o.UID != "rs-1" {
		t.Fatal("FindOwnerIn")
	}
	if _, ok := FindOwnerIn(refs, Deployment); ok {
		t.Fatal("FindOwnerIn: no deployment")
	}
	m := ObjectMeta{OwnerReferences: refs, Finalizers: []string{"f"}}
	if o, ok := m.ControllerOwner(); !ok || o.Name != "web-abc" || !m.HasFinalizer("f") || m.HasFinalizer("g") {
		t.Fatal("meta helpers")
	}
}

func TestSettingTheController(t *testing.T) {
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}
	if err := SetOwnerReference(cm, deploymentRef("d-1")); err != nil {
		t.Fatal(err)
	}
	list := func() string { return jsonOf(t, cm["metadata"].(map[string]any)["ownerReferences"]) }
	if got, want := list(), jsonOf(t, []any{deploymentRef("d-1").JSON()}); got != want {
		t.Fatalf("%s != %s", got, want)
	}
	// Same owner again (new uid: recreated): replaced, not added.
	if err := SetOwnerReference(cm, deploymentRef("d-2")); err != nil {
		t.Fatal(err)
	}
	if got, want := list(), jsonOf(t, []any{deploymentRef("d-2").JSON()}); got != want {
		t.Fatalf("%s != %s", got, want)
	}
	// A plain owner is added beside it.
	plain := OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "c"}
	if err := SetOwnerReference(cm, plain); err != nil {
		t.Fatal(err)
	}
	if n := len(cm["metadata"].(map[string]any)["ownerReferences"].([]any)); n != 2 {
		t.Fatalf("%d entries", n)
	}
	// Another controller is refused.
	other := ControllerOf(ReplicaSet.GVK, "rs", "r")
	err := SetOwnerReference(cm, other)
	if err == nil || err.Error() != "owner reference: already controlled by Deployment web" || IsRetry(err) {
		t.Fatalf("%v", err)
	}
	// Decoded JSON works as well as built maps.
	var decoded map[string]any
	if err := json.Unmarshal([]byte(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"d-0","controller":true}]}}`), &decoded); err != nil {
		t.Fatal(err)
	}
	if err := SetOwnerReference(decoded, other); err == nil {
		t.Fatal("decoded: another controller")
	}
	if err := SetOwnerReference(decoded, deploymentRef("d-3")); err != nil {
		t.Fatal(err)
	}
	if got := jsonOf(t, decoded); got != `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","blockOwnerDeletion":true,"controller":true,"kind":"Deployment","name":"web","uid":"d-3"}]}}` {
		t.Fatal(got)
	}
	if SetOwnerReference(nil, other) == nil {
		t.Fatal("nil dependent")
	}
	if SetOwnerReference(map[string]any{"metadata": 1}, other) == nil {
		t.Fatal("bad metadata")
	}
	if SetOwnerReference(map[string]any{"metadata": map[string]any{"ownerReferences": "x"}}, other) == nil {
		t.Fatal("bad list")
	}
	if err := SetOwnerReference(map[string]any{"metadata": map[string]any{"ownerReferences": nil}}, other); err != nil {
		t.Fatal(err)
	}
}

func TestOwnersOfObjects(t *testing.T) {
	f := newFake(t)
	rs := &fakeObject{kind: ReplicaSet.GVK, namespace: "shop", name: "web-abc", uid: "rs-1"}
	pod := &fakeObject{kind: Pod.GVK, namespace: "shop", name: "web-abc-1", uid: "p-1",
		owners: []OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "c"}, ControllerOf(rs.kind, rs.name, rs.uid)}}
	o := own(f.hand(pod))
	if r, ok := FindOwner(o, ReplicaSet); !ok || r.UID != "rs-1" {
		t.Fatal("FindOwner")
	}
	if r, ok := ControllerOwner(o); !ok || r.Name != "web-abc" {
		t.Fatal("ControllerOwner")
	}
	owner := own(f.hand(rs))
	if ControllerRef(owner) != ControllerOf(ReplicaSet.GVK, "web-abc", "rs-1") {
		t.Fatal("ControllerRef")
	}
	dependent := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "x"}}
	if err := SetControllerReference(dependent, owner); err != nil {
		t.Fatal(err)
	}
	if got := jsonOf(t, dependent); got != `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","ownerReferences":[{"apiVersion":"apps/v1","blockOwnerDeletion":true,"controller":true,"kind":"ReplicaSet","name":"web-abc","uid":"rs-1"}]}}` {
		t.Fatal(got)
	}
}
