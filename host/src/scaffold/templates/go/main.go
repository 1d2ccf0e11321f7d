// {{name}}: a kubewasm plugin. It subscribes to ConfigMap `added` deltas and
// annotates each ConfigMap with `kubewasm.io/hello: {{name}}`.
package main

import kw "{{name}}/sdk"

type hello struct{}

func (hello) Registration() kw.Registration {
	return kw.Registration{}.
		Subscribe(kw.Subscribe(kw.ConfigMap).WithDeltas(kw.Added)).
		Write(kw.ConfigMap)
}

func (hello) Handle(d *kw.Delta) (kw.Handled, error) {
	if _, err := d.RequireObject(); err != nil {
		return kw.Done, err
	}
	kw.Info("hello", "name", d.Name)
	// One merge patch, guarded by the uid: a namesake created since is left alone.
	err := kw.Annotate(d.Ref(kw.ConfigMap), map[string]string{"kubewasm.io/hello": "{{name}}"},
		kw.UIDPrecondition(d.UID))
	return kw.Done, err
}

func init() {
	kw.Export(func(ctx kw.Context) (kw.Plugin, error) { return hello{}, nil })
}

func main() {}
