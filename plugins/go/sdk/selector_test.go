package kubewasm

import (
	"strings"
	"testing"
)

func TestSelector(t *testing.T) {
	labels := []Pair{{"app", "web"}, {"env", "prod"}, {"tier", ""}, {"kubewasm.io/defaults", "enabled"}, {"size", "12"}}
	for s, want := range map[string]bool{
		"": true, "   ": true, "app=web": true, "app==web": true, "app = web": true, "app=db": false,
		"app!=web": false, "app!=db": true, "missing!=x": true, "env in (prod,dev)": true,
		"env in (dev)": false, "missing in (a)": false, "env notin (prod)": false,
		"env notin (dev, qa)": true, "missing notin (a)": true, "app": true, "missing": false,
		"!missing": true, "!app": false, "! app": false, "tier=": true, "app=,env=prod": false,
		"kubewasm.io/defaults=enabled": true, "kubewasm.io/defaults=disabled": false,
		"app=web,env=dev": false, "!legacy,app,env in (prod),app!=db": true, "size>10": true,
		"size<10": false, "app>1": false,
	} {
		sel, err := ParseSelector(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if sel.Matches(labels) != want {
			t.Errorf("%q: want %v", s, want)
		}
	}
	for _, bad := range []string{"env in prod", "env in ()", "env in (a", "env in (a b)", "app=web prod",
		"app=web,", ",app", "=web", "!", "in", "app=we$b", "-app=x", "a/b/c=1", "/x=1", "size>ten", "app)"} {
		_, err := ParseSelector(bad)
		if err == nil || !strings.Contains(err.Error(), "invalid label selector") {
			t.Errorf("%q should not parse (%v)", bad, err)
		}
	}
	text := "app=web,env!=dev,tier in (a,b),x notin (c),y,!z,n>1,m<2"
	sel, _ := ParseSelector(text)
	if sel.String() != text {
		t.Errorf("round trip: %s", sel.String())
	}
}
