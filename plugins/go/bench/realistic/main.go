//go:build wasip1

// realistic in Go: plugins/testing/realistic's twin (see its README.md):
// per Pod delta, label `app`, two fields in one host call, the Pod's Node
// from the cache, and one merge patch annotating the Pod with the Node's
// zone. No JSON is parsed.
package main

import kw "kubewasm/plugins/sdk"

const (
	zoneLabel      = "topology.kubernetes.io/zone"
	zoneAnnotation = "kubewasm.io/zone"
)

var pointers = []string{"/spec/nodeName", "/status/phase"}

type realistic struct{}

func (realistic) Registration() kw.Registration {
	return kw.Registration{}.
		Subscribe(
			kw.Subscribe(kw.Pod).WithDeltas(kw.Added, kw.Updated, kw.Resync),
			kw.Subscribe(kw.Node).CacheOnly(),
		).
		Write(kw.Pod)
}

// text is a fields() value's string, if it is one.
func text(v *kw.FieldValue) (string, bool) {
	if v == nil {
		return "", false
	}
	return v.AsString()
}

func (realistic) Handle(d *kw.Delta) (kw.Handled, error) {
	if d.Type == kw.Synced {
		return kw.Done, nil
	}
	pod, err := d.RequireObject()
	if err != nil {
		return kw.Done, err
	}
	// Read like a real handler would, used by none (as in the Rust plugin).
	pod.Label("app")
	fields := pod.Fields(pointers...)
	zone := "unknown"
	if node, ok := text(fields[0]); ok {
		n, err := kw.Get(kw.Node, "", node)
		if err != nil {
			return kw.Done, err
		}
		if n != nil {
			if z, ok := n.Label(zoneLabel); ok {
				zone = z
			}
		}
	}
	return kw.Done, kw.Annotate(d.Ref(kw.Pod), map[string]string{zoneAnnotation: zone}, kw.UIDPrecondition(d.UID))
}

func init() { kw.Export(func(kw.Context) (kw.Plugin, error) { return realistic{}, nil }) }

func main() {}
