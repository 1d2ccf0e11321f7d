//go:build !wasip1

package kubewasm

import (
	"bufio"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// annotator is a plugin for the exported FakeHost's own tests.
type annotator struct{ name string }

func (a annotator) Registration() Registration {
	return Registration{}.
		Subscribe(Subscribe(ConfigMap).WithLabels("app=web").WithDeltas(Added)).
		Subscribe(Subscribe(ConfigMap)).
		Subscribe(Subscribe(Pod).CacheOnly()).
		Write(ConfigMap).
		AddIndex(Index{Name: "node", Kind: Pod, Pointer: "/spec/nodeName"})
}

func (a annotator) Handle(d *Delta) (Handled, error) {
	Info("seen", "key", d.Key())
	if d.Type == Deleted {
		if err := Delete(d.Ref(ConfigMap), Background, UIDPrecondition(d.UID)); err != nil {
			return Done, err
		}
		return Done, Retry("try later")
	}
	o, err := d.RequireObject()
	if err != nil {
		return Done, err
	}
	if err := AnnotateObject(o, map[string]string{"by": a.name}); err != nil {
		return Done, err
	}
	if err := RecordEventAbout(o, Normal, "Annotated", "done"); err != nil {
		return Done, err
	}
	return RequeueAfter(30 * time.Second), nil
}

func cm(ns, name, labels string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"` + ns +
		`","labels":` + labels + `},"data":{"k":"v"}}`
}

func TestFakeHostLoadsHandlesAndEnforcesTheRegistration(t *testing.T) {
	f := NewFakeHost(t)
	Export(func(ctx Context) (Plugin, error) { return annotator{name: ctx.Name}, nil })
	t.Cleanup(func() { factory = nil })
	if err := f.Load("ann", ""); err != nil {
		t.Fatal(err)
	}
	d := f.Added(cm("a", "web", `{"app":"web"}`))
	if d.Subscription != 0 {
		t.Fatal(d.Subscription)
	}
	if h, err := f.Handle(d); err != nil || h != RequeueAfter(30*time.Second) {
		t.Fatal(h, err)
	}
	want := []string{
		`patch ConfigMap a/web merge {"metadata":{"annotations":{"by":"ann"}}} uid=uid-a-web`,
		"event ConfigMap a/web Normal Annotated: done uid=uid-a-web",
	}
	if got := f.TakeActionLines(); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q", got)
	}
	d = f.Updated(cm("a", "web", `{"app":"api"}`))
	if d.Subscription != 1 || d.ResourceVersion != "2" {
		t.Fatal(d.Subscription, d.ResourceVersion)
	}
	if v, _ := d.OldObject.Label("app"); v != "web" {
		t.Fatal(v)
	}
	if _, err := f.Handle(f.Deleted(cm("a", "web", `{}`))); !IsRetry(err) {
		t.Fatal(err)
	}
	if len(f.Actions()) != 0 {
		t.Fatal("a failed call's actions are dropped", f.Actions())
	}
	if f.LiveHandles() != 0 {
		t.Fatal("handles left", f.LiveHandles())
	}
	var logs []string
	for _, l := range f.TakeLogs() {
		logs = append(logs, l.String())
	}
	if strings.Join(logs, "|") != "info seen key=a/web|info seen key=a/web" {
		t.Fatal(logs)
	}
	if _, err := List(Namespace, "", ""); err == nil || !strings.Contains(err.Error(), "not subscribed") {
		t.Fatal(err)
	}
	if err := Delete(Ref(Pod, "a", "p"), Background, Preconditions{}); err == nil ||
		!strings.Contains(err.Error(), "not declared") {
		t.Fatal(err)
	}
	if err := Apply(`{"kind":"ConfigMap"}`, true, Preconditions{}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Fatal(err)
	}
	f.Put(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"a"},"spec":{"nodeName":"n1"}}`)
	if objs, err := ByIndex("node", "n1"); err != nil || len(objs) != 1 || objs[0].Name() != "p" {
		t.Fatal(objs, err)
	}
	if _, err := ByIndex("owner", "x"); err == nil {
		t.Fatal("undeclared index")
	}
}

func TestFakeHostCacheAndObjects(t *testing.T) {
	f := NewFakeHost(t)
	f.Put(cm("b", "two", `{"app":"web","tier":"db"}`)).Put(cm("a", "one", `{"app":"web"}`)).
		Put(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a","generation":3,
		"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"},"managedFields":[{}],
		"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"n","uid":"u","controller":true}]},
		"spec":{"n":1,"f":1.5,"list":[1,2],"html":"<b>"}}`)
	keys := func(objs []*Object, err error) string {
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, o.Key())
		}
		return strings.Join(out, ",")
	}
	if got := keys(List(ConfigMap, "", "")); got != "a/one,b/two" {
		t.Fatal(got)
	}
	if got := keys(List(ConfigMap, "", "tier notin (db)")); got != "a/one" {
		t.Fatal(got)
	}
	if got := keys(List(Resource("configmaps"), "b", "app")); got != "b/two" {
		t.Fatal(got)
	}
	if _, err := List(ConfigMap, "", "a in b"); err == nil || !strings.Contains(err.Error(), "invalid selector") {
		t.Fatal(err)
	}
	ns, err := Get(Namespace, "", "a")
	if err != nil || ns == nil {
		t.Fatal(ns, err)
	}
	if g, ok := ns.Generation(); !ok || g != 3 {
		t.Fatal(g)
	}
	if v, _ := ns.Field("/spec/n"); v.Kind != FieldInt || v.Int != 1 {
		t.Fatal(v)
	}
	if v, _ := ns.Field("/spec/f"); v.Kind != FieldFloat || v.Float != 1.5 {
		t.Fatal(v)
	}
	if v, _ := ns.Field("/spec/list"); v.Kind != FieldJSON || v.Text != "[1,2]" {
		t.Fatal(v)
	}
	if c, ok := ns.Controller(); !ok || c.Name != "n" {
		t.Fatal(c)
	}
	if j := ns.ToJSON(); strings.Contains(j, "managedFields") || strings.Contains(j, "annotations") ||
		!strings.Contains(j, `"<b>"`) {
		t.Fatal(j)
	}
	one, _ := Get(ConfigMap, "a", "one")
	f.Put(cm("a", "one", `{"app":"api"}`))
	if v, _ := one.Label("app"); v != "web" {
		t.Fatal("a handle is a snapshot", v)
	}
	if again, _ := Get(ConfigMap, "a", "one"); again.ResourceVersion() != "2" || again.UID() != "uid-a-one" {
		t.Fatal(again.ResourceVersion())
	}
	if NowRFC3339() != "2026-01-01T00:00:00Z" {
		t.Fatal(NowRFC3339())
	}
	f.SetTime("2024-02-29T23:59:59Z")
	f.Advance(1500 * time.Millisecond)
	if NowRFC3339() != "2024-03-01T00:00:00Z" {
		t.Fatal(NowRFC3339())
	}
	f.SetLogLevel(LevelInfo)
	Debug("hidden")
	if LogEnabled(LevelDebug) || len(f.Logs()) != 0 {
		t.Fatal("debug enabled")
	}
}

// The same golden cases the host's parser passes (what apimachinery's
// labels.Parse gives), through ParseSelector on the fake.
func TestFakeSelectorsAgreeWithApimachineryGolden(t *testing.T) {
	NewFakeHost(t)
	file, err := os.Open("../../../host/src/informer/selector_golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	scan := bufio.NewScanner(file)
	var sets []map[string]string
	count := 0
	for scan.Scan() {
		line := scan.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if sets == nil {
			var header struct {
				LabelSets []map[string]string `json:"label_sets"`
			}
			if err := json.Unmarshal([]byte(line), &header); err != nil {
				t.Fatal(err)
			}
			sets = header.LabelSets
			continue
		}
		var c []*string
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		sel, err := ParseSelector(*c[0])
		switch {
		case err == nil && c[1] != nil:
			if sel.String() != *c[1] {
				t.Fatalf("%q: %q, want %q", *c[0], sel.String(), *c[1])
			}
			got := ""
			for _, set := range sets {
				if sel.MatchesMap(set) {
					got += "1"
				} else {
					got += "0"
				}
			}
			if got != *c[2] {
				t.Fatalf("%q matches %s, want %s", *c[0], got, *c[2])
			}
			sel.Close()
		case err != nil && c[1] == nil:
		default:
			t.Fatalf("%q: got %v %v, apimachinery gives %v", *c[0], sel, err, c[1])
		}
		count++
	}
	if count < 1000 {
		t.Fatal(count, "golden cases")
	}
}
