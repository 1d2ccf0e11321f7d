package kubewasm

import (
	"errors"
	"testing"
)

func TestFinalizerPatches(t *testing.T) {
	none := []string(nil)
	some := []string{"a", "x/y", "a"}
	check := func(p JSONPatch, ok bool, want string) {
		t.Helper()
		if want == "" {
			if ok {
				t.Fatalf("want no patch, got %s", p)
			}
			return
		}
		if !ok || p.String() != want {
			t.Fatalf("got %s (%v), want %s", p, ok, want)
		}
	}
	p, ok := AddFinalizerPatch(none, "x/y")
	check(p, ok, `[{"op":"add","path":"/metadata/finalizers","value":["x/y"]}]`)
	p, ok = AddFinalizerPatch(some, "x/y")
	check(p, ok, "")
	p, ok = AddFinalizerPatch(some, "b")
	check(p, ok, `[{"op":"add","path":"/metadata/finalizers/-","value":"b"}]`)
	p, ok = RemoveFinalizerPatch(some, "b")
	check(p, ok, "")
	p, ok = RemoveFinalizerPatch(none, "b")
	check(p, ok, "")
	p, ok = RemoveFinalizerPatch(some, "a")
	check(p, ok, `[{"op":"remove","path":"/metadata/finalizers/2"},{"op":"remove","path":"/metadata/finalizers/0"}]`)
}

func TestFinalizersGuardedByResourceVersion(t *testing.T) {
	f := newFake(t)
	o := own(f.hand(&fakeObject{kind: ConfigMap.GVK, namespace: "ns", name: "c", uid: "u-1",
		resourceVersion: "7", finalizers: []string{"example.com/f"}}))
	if ok, err := AddFinalizer(o, "example.com/f"); ok || err != nil {
		t.Fatalf("already there: %v %v", ok, err)
	}
	if ok, err := AddFinalizer(o, "example.com/g"); !ok || err != nil {
		t.Fatalf("add: %v %v", ok, err)
	}
	if ok, err := RemoveFinalizer(o, "example.com/f"); !ok || err != nil {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if ok, err := RemoveFinalizer(o, "example.com/g"); ok || err != nil {
		t.Fatalf("not there: %v %v", ok, err)
	}
	wantActions(t, f,
		`patch 1 v1, Kind=ConfigMap ns/c uid="u-1" rv="7" [{"op":"add","path":"/metadata/finalizers/-","value":"example.com/g"}]`,
		`patch 1 v1, Kind=ConfigMap ns/c uid="u-1" rv="7" [{"op":"remove","path":"/metadata/finalizers/0"}]`)
}

func TestPreconditions(t *testing.T) {
	if !NoPreconditions.IsNone() || !(Preconditions{}).IsNone() || !UIDPrecondition("").IsNone() {
		t.Fatal("none")
	}
	p := UIDPrecondition("u-1").WithResourceVersion("7")
	if p != (Preconditions{UID: "u-1", ResourceVersion: "7"}) || p.UIDOnly() != UIDPrecondition("u-1") {
		t.Fatalf("%+v", p)
	}
	if p.WithUID("").UID != "" || p.WithResourceVersion("").ResourceVersion != "" {
		t.Fatal("clearing")
	}
	d := &Delta{Namespace: "ns", Name: "n", UID: "u", ResourceVersion: "3"}
	if d.Preconditions() != (Preconditions{UID: "u", ResourceVersion: "3"}) {
		t.Fatal("delta preconditions")
	}
	f := newFake(t)
	o := own(f.hand(&fakeObject{kind: Pod.GVK, uid: "u-2", resourceVersion: "9"}))
	if PreconditionsOf(o) != (Preconditions{UID: "u-2", ResourceVersion: "9"}) {
		t.Fatal("object preconditions")
	}
}

func TestActionsAndRefusals(t *testing.T) {
	f := newFake(t)
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "ns"}, "data": map[string]string{"k": "<v>"}}
	if err := Apply(cm, true, NoPreconditions); err != nil {
		t.Fatal(err)
	}
	if err := ApplyStatus(`{"x":1}`, UIDPrecondition("u")); err != nil {
		t.Fatal(err)
	}
	target := Ref(ConfigMap, "ns", "c")
	if err := Annotate(target, map[string]string{"b": "2", "a": "1"}, UIDPrecondition("u")); err != nil {
		t.Fatal(err)
	}
	if err := Delete(Ref(Namespace, "", "gone"), Orphan, NoPreconditions); err != nil {
		t.Fatal(err)
	}
	if err := RecordEventFor(target, Warning, "Broken", "note"); err != nil {
		t.Fatal(err)
	}
	o := own(f.hand(&fakeObject{kind: Deployment.GVK, namespace: "shop", name: "web", uid: "d-1"}))
	if err := RecordEventAbout(o, Normal, "Seen", "hi"); err != nil {
		t.Fatal(err)
	}
	if err := DeleteObject(o, Foreground); err != nil {
		t.Fatal(err)
	}
	if err := AnnotateObject(o, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	wantActions(t, f,
		`apply force=true uid="" rv="" {"apiVersion":"v1","data":{"k":"<v>"},"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}`,
		`apply-status uid="u" rv="" {"x":1}`,
		`patch 0 v1, Kind=ConfigMap ns/c uid="u" rv="" {"metadata":{"annotations":{"a":"1","b":"2"}}}`,
		`delete 2 v1, Kind=Namespace gone uid="" rv=""`,
		`event 1 v1, Kind=ConfigMap ns/c uid="" Broken "note"`,
		`event 0 apps/v1, Kind=Deployment shop/web uid="d-1" Seen "hi"`,
		`delete 1 apps/v1, Kind=Deployment shop/web uid="d-1" rv=""`,
		`patch 0 apps/v1, Kind=Deployment shop/web uid="d-1" rv="" {"metadata":{"annotations":{"k":"v"}}}`)

	f.refuse = &ActionError{Kind: WriteForbidden, Message: "may not delete pods"}
	err := Delete(Ref(Pod, "ns", "p"), Background, NoPreconditions)
	var ae *ActionError
	if err == nil || IsRetry(err) || !errors.As(err, &ae) || ae.Kind != WriteForbidden ||
		err.Error() != "action refused, not granted: may not delete pods" {
		t.Fatalf("refusal: %v", err)
	}
	f.refuse = &ActionError{Kind: NotDeclared, Message: "pods"}
	if err := Apply("{}", false, NoPreconditions); err.Error() != "action refused, not declared in writes: pods" {
		t.Fatalf("refusal: %v", err)
	}
	f.refuse = &CacheError{Kind: ReadForbidden, Message: "may not read pods"}
	_, err = List(Pod, "", "")
	var ce *CacheError
	if err == nil || IsRetry(err) || !errors.As(err, &ce) || err.Error() != "cache read refused, not granted: may not read pods" {
		t.Fatalf("cache refusal: %v", err)
	}
	if err := Apply(make(chan int), false, NoPreconditions); err == nil || IsRetry(err) {
		t.Fatalf("unencodable: %v", err)
	}
}

func TestObjectRefs(t *testing.T) {
	m := ObjectMeta{Namespace: "shop", Name: "web-1"}
	r := RefTo(Pod, &m)
	if r != Ref(Pod, "shop", "web-1") || r.Key() != "shop/web-1" || Ref(Node, "", "n").Key() != "n" {
		t.Fatalf("%+v", r)
	}
	o := OwnerRef(OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc"}, "shop")
	if o != Ref(ReplicaSet, "shop", "web-abc") {
		t.Fatalf("%+v", o)
	}
	d := &Delta{Namespace: "shop", Name: "web-1"}
	if d.Ref(Pod) != r {
		t.Fatal("delta ref")
	}
}
