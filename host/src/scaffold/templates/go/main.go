//go:build wasip1

// {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas and
// annotates each ConfigMap with `kubewasm.io/hello: {{name}}`.
package main

import kw "{{name}}/sdk"

type hello struct{}

func (hello) Registration() kw.Registration {
	return kw.Registration{
		Subscriptions: []kw.Subscription{{Kind: kw.ConfigMap, Deltas: []kw.DeltaType{kw.Added}}},
		Writes:        []kw.KindRef{kw.ConfigMap},
	}
}

func (hello) Handle(d *kw.Delta) error {
	meta, _, err := d.Parts()
	if err != nil {
		return err
	}
	kw.Info("hello", "name", meta.Name)
	return kw.Patch(kw.RefTo(kw.ConfigMap, meta), kw.MergePatch,
		`{"metadata":{"annotations":{"kubewasm.io/hello":"{{name}}"}}}`)
}

func init() {
	kw.Export(func(config string) (kw.Plugin, error) { return hello{}, nil })
}

func main() {}
