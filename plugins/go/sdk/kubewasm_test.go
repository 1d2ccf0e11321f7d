package kubewasm

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type cfg struct {
	N    int    `json:"n"`
	Name string `json:"name"`
}

func TestParseConfig(t *testing.T) {
	for _, empty := range []string{"", "  ", "null", "{}"} {
		c := cfg{N: 7}
		if err := ParseConfig(empty, &c); err != nil || c.N != 7 {
			t.Fatalf("%q: %v %+v", empty, err, c)
		}
	}
	c := cfg{N: 7}
	if err := (Context{Config: `{"n": 3}`}).ParseConfig(&c); err != nil || c.N != 3 {
		t.Fatalf("%v %+v", err, c)
	}
	for _, bad := range []string{`{"m": 3}`, `{"n": "x"}`, `{`, `{} {}`} {
		if err := ParseConfig(bad, &c); err == nil || !strings.HasPrefix(err.Error(), "invalid config: ") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if (Context{Name: "p"}).FieldManager() != "kubewasm/p" {
		t.Fatal("field manager")
	}
}

func TestHandledAndErrors(t *testing.T) {
	if _, ok := Done.RequeueDelay(); ok {
		t.Fatal("done")
	}
	if d, ok := RequeueAfter(1500 * time.Millisecond).RequeueDelay(); !ok || d != 1500*time.Millisecond {
		t.Fatal(d)
	}
	if h := RequeueAfter(1999 * time.Microsecond); h.ms != 1 || !h.requeue {
		t.Fatalf("%+v", h)
	}
	if h := RequeueAfter(-time.Second); h.ms != 0 || !h.requeue {
		t.Fatalf("%+v", h)
	}
	if d, _ := (Handled{requeue: true, ms: ^uint64(0)}).RequeueDelay(); d <= 0 {
		t.Fatal("saturating")
	}
	if !IsRetry(Retry("x")) || !IsRetry(Retryf("%d", 1)) || IsRetry(Permanent("x")) || IsRetry(errors.New("x")) {
		t.Fatal("IsRetry")
	}
	wrapped := errors.Join(errors.New("ctx"), Retry("later"))
	if !IsRetry(wrapped) {
		t.Fatal("IsRetry wrapped")
	}
	if Permanentf("a %s", "b").Error() != "a b" {
		t.Fatal("Permanentf")
	}
	f := &Failure{Kind: FailureConflict, Message: "rv 3 is stale"}
	if !f.IsConflict() || f.String() != "conflict: rv 3 is stale" || FailureActionFailed.String() != "action-failed" {
		t.Fatal(f)
	}
	if (&Failure{Kind: FailureTrapped}).IsConflict() || (*Failure)(nil).IsConflict() {
		t.Fatal("IsConflict")
	}
}

func TestKindsAndDeltaTypes(t *testing.T) {
	d := GVKFromAPIVersion("apps/v1", "Deployment")
	if d != Deployment.GVK || d.APIVersion() != "apps/v1" || !d.Is(Deployment) || d.Is(Pod) {
		t.Fatal(d)
	}
	if GVKFromAPIVersion("v1", "Pod") != Pod.GVK || Pod.APIVersion() != "v1" {
		t.Fatal("core")
	}
	if Event != Kind("events.k8s.io", "v1", "Event") || !GVKFromAPIVersion("events.k8s.io/v1", "Event").Is(Event) ||
		GVKFromAPIVersion("v1", "Event").Is(Event) {
		t.Fatal("Event")
	}
	if Resource("deployments.apps").String() != "deployments.apps" || Pod.String() != "v1, Kind=Pod" {
		t.Fatal("String")
	}
	if Pod.GVK.Is(Resource("pods")) {
		t.Fatal("resource names are the host's to resolve")
	}
	if Resync.String() != "resync" || Requeue.String() != "requeue" || Synced.HasObject() || !Requeue.HasObject() {
		t.Fatal("delta types")
	}
	for _, d := range SubscribableDeltaTypes {
		if d == Requeue {
			t.Fatal("requeue is not subscribable")
		}
	}
}

func TestSubscriptionBuilders(t *testing.T) {
	s := Subscribe(Pod).InNamespace("shop").WithLabels("app=web").WithFieldSelector("spec.nodeName=n1").
		WithDeltas(Added).WithFields("/spec/nodeName").ResyncEvery(60)
	if s.Kind != Pod || s.Namespace != "shop" || s.LabelSelector != "app=web" || s.FieldSelector != "spec.nodeName=n1" ||
		len(s.Deltas) != 1 || s.Deltas[0] != Added || len(s.Fields) != 1 {
		t.Fatalf("%+v", s)
	}
	if n, ok := s.resync(); !ok || n != 60 {
		t.Fatal("resync 60")
	}
	if n, ok := Subscribe(Pod).WithoutResync().resync(); !ok || n != 0 {
		t.Fatal("no resync")
	}
	if _, ok := Subscribe(Pod).resync(); ok {
		t.Fatal("default resync is none")
	}
	if _, ok := (Subscription{ResyncSeconds: 5, NoResync: true}).resync(); !ok {
		t.Fatal("NoResync wins")
	}
	if got := Subscribe(Pod).Deltas; len(got) != 4 || got[3] != Resync {
		t.Fatal(got)
	}
	if Subscribe(Node).CacheOnly().Deltas != nil {
		t.Fatal("cache only")
	}
	base := Registration{}.Subscribe(s)
	r := base.Write(Pod, Resource("deployments.apps")).AddIndex(Index{Name: "by-node", Kind: Pod, Pointer: "/spec/nodeName"})
	if len(r.Subscriptions) != 1 || len(r.Writes) != 2 || r.Indexes[0].Name != "by-node" || len(base.Writes) != 0 {
		t.Fatalf("%+v", r)
	}
}

// counter is a plugin that counts its deltas.
type counter struct {
	n    int
	name string
	sel  *LabelSelector
}

func (c *counter) Registration() Registration { return Registration{}.Write(Pod) }

func (c *counter) Handle(d *Delta) (Handled, error) {
	c.n++
	switch c.n {
	case 1:
		// Reads create handles: dropped when Handle returns.
		objs, err := List(ConfigMap, "", "")
		if err != nil || len(objs) != 2 {
			return Done, Permanentf("list: %v %d", err, len(objs))
		}
		objs[0].Release()
		objs[0].Release()
		if !c.sel.MatchesObject(objs[1]) || !c.sel.MatchesObject(d.Object) {
			return Done, Permanent("no match")
		}
		return Done, nil
	case 2:
		_ = d.Object.Name()
		return Done, nil
	case 3:
		return RequeueAfter(time.Second), nil
	case 4:
		panic("boom")
	}
	return Done, Retry(c.name + " had enough")
}

func TestRegisterThenHandle(t *testing.T) {
	f := newFake(t)
	f.cache = []*fakeObject{
		{kind: ConfigMap.GVK, namespace: "a", name: "x", labels: map[string]string{"app": "web"}},
		{kind: ConfigMap.GVK, namespace: "b", name: "y", labels: map[string]string{"app": "web"}},
	}
	if _, err := handle(&Delta{Type: Synced}); err == nil || err.Error() != "handle called before register" {
		t.Fatal(err)
	}
	if _, err := register(Context{}); err == nil || !strings.Contains(err.Error(), "kubewasm.Export") {
		t.Fatal(err)
	}
	Export(func(ctx Context) (Plugin, error) {
		var c cfg
		if err := ctx.ParseConfig(&c); err != nil {
			return nil, err
		}
		sel, err := ParseSelector("app=web")
		if err != nil {
			return nil, err
		}
		return &counter{name: ctx.Name, sel: sel}, nil
	})
	if _, err := register(Context{Name: "c", Config: `{"x":1}`}); err == nil {
		t.Fatal("bad config accepted")
	}
	reg, err := register(Context{Name: "c", Version: "0123456789ab", Config: "{}"})
	if err != nil || len(reg.Writes) != 1 || reg.Writes[0] != Pod {
		t.Fatalf("%v %+v", err, reg)
	}
	selectors := len(f.selectors)
	delta := func() *Delta {
		o := &fakeObject{kind: ConfigMap.GVK, namespace: "a", name: "x", labels: map[string]string{"app": "web"}}
		return &Delta{Type: Added, Namespace: "a", Name: "x", Object: own(f.hand(o)), Attempt: 1}
	}
	d := delta()
	if h, err := handle(d); err != nil || h != Done {
		t.Fatalf("%v %+v", err, h)
	}
	// Every object handle of the call is dropped, each once; the plugin's
	// selector lives on.
	if len(f.objects) != 0 || len(f.dropped) != 3 || len(f.selectors) != selectors {
		t.Fatalf("objects %d dropped %v selectors %d", len(f.objects), f.dropped, len(f.selectors))
	}
	// An object kept past its call panics, as a permanent error.
	_, err = handle(&Delta{Type: Updated, Object: d.Object})
	if err == nil || IsRetry(err) || !strings.Contains(err.Error(), "kubewasm: object used after") {
		t.Fatalf("%v", err)
	}
	if h, err := handle(delta()); err != nil || h != RequeueAfter(time.Second) {
		t.Fatalf("%v %+v", err, h)
	}
	// A panic is permanent, and says where it was raised.
	if _, err := handle(delta()); err == nil || IsRetry(err) ||
		!strings.HasPrefix(err.Error(), "panic: boom (at ") ||
		!strings.Contains(err.Error(), "(*counter).Handle, ") ||
		!strings.Contains(err.Error(), "kubewasm_test.go:") {
		t.Fatalf("%v", err)
	}
	if _, err := handle(delta()); !IsRetry(err) || err.Error() != "c had enough" {
		t.Fatalf("%v", err)
	}
	if len(f.objects) != 0 {
		t.Fatalf("leaked %d handles", len(f.objects))
	}
}

func TestSelectors(t *testing.T) {
	f := newFake(t)
	if _, err := ParseSelector("!x"); err == nil || err.Error() != "unable to parse requirement: !x" {
		t.Fatal(err)
	}
	s, err := ParseSelector("b=2,a=1")
	if err != nil {
		t.Fatal(err)
	}
	if !s.MatchesMap(map[string]string{"a": "1", "b": "2", "c": "3"}) || s.Matches([]Pair{{"a", "1"}}) {
		t.Fatal("matches")
	}
	if s.String() != "a=1,b=2" || s.IsEverything() {
		t.Fatal(s.String())
	}
	f.cache = []*fakeObject{{kind: Pod.GVK, namespace: "n", name: "p"}}
	if objs, err := ListSelected(Pod, "", s); err != nil || len(objs) != 1 {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	(*LabelSelector)(nil).Close()
	if len(f.selectors) != 0 {
		t.Fatal("not dropped")
	}
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("use after Close must panic")
		}
	}()
	_ = s.String()
}

func TestObjectsAndDeltas(t *testing.T) {
	f := newFake(t)
	f.cache = []*fakeObject{{kind: Node.GVK, name: "n1", labels: map[string]string{"zone": "a"}}}
	o := own(f.hand(&fakeObject{kind: Pod.GVK, namespace: "shop", name: "web-1", uid: "u", resourceVersion: "4",
		annotations: map[string]string{"note": "hi"}, finalizers: []string{"f"}, deletionTimestamp: "2026-01-01T00:00:00Z",
		fields: map[string]FieldValue{
			"/spec/nodeName": {Kind: FieldText, Text: "n1"},
			"/spec/replicas": {Kind: FieldInt, Int: 3},
			"/spec/paused":   {Kind: FieldBool, Bool: true},
			"/data":          {Kind: FieldJSON, Text: `{"k":"v"}`},
			"/spec/ratio":    {Kind: FieldFloat, Float: 0.5},
		}}))
	if o.Key() != "shop/web-1" || !o.Is(Pod) || !o.IsTerminating() || !o.HasFinalizer("f") {
		t.Fatal("object helpers")
	}
	if v, ok := o.Annotation("note"); !ok || v != "hi" {
		t.Fatal("annotation")
	}
	if _, ok := o.Label("none"); ok {
		t.Fatal("label")
	}
	if s, ok := o.FieldString("/spec/nodeName"); !ok || s != "n1" {
		t.Fatal("FieldString")
	}
	if n, ok := o.FieldInt("/spec/replicas"); !ok || n != 3 {
		t.Fatal("FieldInt")
	}
	if b, ok := o.FieldBool("/spec/paused"); !ok || !b {
		t.Fatal("FieldBool")
	}
	if _, ok := o.FieldString("/spec/replicas"); ok {
		t.Fatal("not a string")
	}
	var data map[string]string
	if found, err := o.FieldDecode("/data", &data); !found || err != nil || data["k"] != "v" {
		t.Fatal(err)
	}
	if found, err := o.FieldDecode("/nothing", &data); found || err != nil {
		t.Fatal("absent")
	}
	vs := o.Fields("/spec/ratio", "/nothing", "/data")
	if len(vs) != 3 || vs[1] != nil || string(vs[0].RawJSON()) != "0.5" || !vs[2].IsObject() {
		t.Fatalf("%v", vs)
	}
	if string((FieldValue{Kind: FieldText, Text: `a"b`}).RawJSON()) != `"a\"b"` ||
		string((FieldValue{}).RawJSON()) != "null" {
		t.Fatal("RawJSON")
	}
	var pod struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	if err := o.Decode(&pod); err != nil || pod.Metadata.Name != "web-1" {
		t.Fatal(err)
	}
	node, err := Get(Node, "", "n1")
	if err != nil || node == nil || node.Name() != "n1" {
		t.Fatal(err)
	}
	if missing, err := Get(Node, "", "n2"); missing != nil || err != nil {
		t.Fatal("missing")
	}
	if _, err := ByIndex("x", "y"); err == nil || err.Error() != "cache read refused, unknown index: no index" {
		t.Fatal(err)
	}
	d := &Delta{Type: Updated, Namespace: "shop", Name: "web-1", Object: o, OldObject: node, Attempt: 2,
		LastFailure: &Failure{Kind: FailureRetry, Message: "later"}}
	if d.Key() != "shop/web-1" || !d.Is(Pod) || !d.Retried() || d.OldMeta().Name != "n1" {
		t.Fatal("delta helpers")
	}
	if g, ok := d.Kind(); !ok || g != Pod.GVK {
		t.Fatal("delta kind")
	}
	synced := &Delta{Type: Synced}
	if _, err := synced.RequireObject(); err == nil || err.Error() != "synced delta carries no object" {
		t.Fatal(err)
	}
	if _, ok := synced.Kind(); ok || synced.Is(Pod) || synced.OldMeta() != nil || synced.Retried() {
		t.Fatal("synced")
	}
	if _, err := (&Delta{Type: Deleted, Namespace: "ns", Name: "n"}).RequireObject(); err.Error() != "deleted delta for ns/n carries no object" {
		t.Fatal(err)
	}
}

func TestLogAndClock(t *testing.T) {
	f := newFake(t)
	Debug("hidden", "a", "b")
	Info("shown", "a", "b", "odd")
	Error("bad")
	if strings.Join(f.logs, "|") != "2 shown [{a b} {odd }]|4 bad []" || LogEnabled(LevelDebug) {
		t.Fatal(f.logs)
	}
	if NowRFC3339() != "2023-11-14T22:13:20Z" || Now().Unix() != 1700000000 {
		t.Fatal("clock")
	}
	if s, ns := NowUnix(); s != 1700000000 || ns != 5 {
		t.Fatal("NowUnix")
	}
}

func TestNoHostPanicsClearly(t *testing.T) {
	host = nil
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "GOOS=wasip1") {
			t.Fatalf("%v", r)
		}
	}()
	Info("x")
}
