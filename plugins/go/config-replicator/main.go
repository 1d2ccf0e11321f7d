//go:build wasip1

// config-replicator in Go: the same config, registration and actions as
// plugins/config-replicator (see its README.md).
package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	kw "kubewasm/plugins/sdk"
)

const (
	replica     = "kubewasm.io/replica"
	replicaOf   = "kubewasm.io/replica-of"
	replicateTo = "kubewasm.io/replicate-to"
)

type config struct {
	SourceSelector    string `json:"sourceSelector"`
	NamespaceSelector string `json:"namespaceSelector"`
}

type replicator struct {
	source, namespaces *kw.Selector
}

func newReplicator(text string) (kw.Plugin, error) {
	c := config{SourceSelector: "kubewasm.io/replicate=true"}
	if err := kw.ParseConfig(text, &c); err != nil {
		return nil, err
	}
	source, err := kw.ParseSelector(c.SourceSelector)
	if err != nil {
		return nil, err
	}
	namespaces, err := kw.ParseSelector(c.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	return &replicator{source: source, namespaces: namespaces}, nil
}

func (r *replicator) Registration() kw.Registration {
	return kw.Registration{
		Subscriptions: []kw.Subscription{
			{Kind: kw.ConfigMap, Deltas: []kw.DeltaType{kw.Added, kw.Updated, kw.Deleted, kw.Resync},
				Fields: []string{"/data", "/binaryData"}},
			{Kind: kw.Namespace, Deltas: []kw.DeltaType{kw.Added, kw.Updated},
				Fields: []string{"/metadata/labels"}},
		},
		Writes: []kw.KindRef{kw.ConfigMap},
	}
}

func (r *replicator) Handle(d *kw.Delta) error {
	switch {
	case d.Type == kw.Synced:
		return nil
	case d.Is(kw.Namespace):
		return r.namespaceChanged(d)
	case d.Is(kw.ConfigMap):
		return r.configMapChanged(d)
	}
	return nil
}

func (r *replicator) isSource(m *kw.ObjectMeta) bool {
	v, ok := m.Label(replica)
	return !(ok && v == "true") && r.source.Matches(m.Labels)
}

// selectorFor is the namespace selector of a source: its annotation or the config's.
func (r *replicator) selectorFor(m *kw.ObjectMeta) (*kw.Selector, error) {
	text, ok := m.Annotation(replicateTo)
	if !ok {
		return r.namespaces, nil
	}
	s, err := kw.ParseSelector(text)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", replicateTo, m.Key(), err)
	}
	return s, nil
}

// copyOf is what a copy is made of: the source's name, key, data and binaryData.
type copyOf struct {
	name, of string
	data     map[string]json.RawMessage
}

func newCopy(m *kw.ObjectMeta, source *kw.Object) (*copyOf, error) {
	c := &copyOf{name: m.Name, of: m.Key(), data: map[string]json.RawMessage{}}
	for _, f := range [][2]string{{"binaryData", "/binaryData"}, {"data", "/data"}} {
		v, ok := source.Field(f[1])
		if !ok || v.Kind == kw.FieldNull {
			continue
		}
		// Objects come back as their JSON text: embedded as is, never parsed.
		if v.Kind != kw.FieldJSON || len(v.Text) == 0 || v.Text[0] != '{' {
			return nil, kw.Permanent(fmt.Sprintf("%s has a non-object %s", c.of, f[0]))
		}
		c.data[f[0]] = json.RawMessage(v.Text)
	}
	return c, nil
}

func (c *copyOf) applyInto(namespace string) error {
	object := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":        c.name,
			"namespace":   namespace,
			"labels":      map[string]string{replica: "true"},
			"annotations": map[string]string{replicaOf: c.of},
		},
	}
	for k, v := range c.data {
		object[k] = v
	}
	return kw.Apply(object, true)
}

// deleteCopies deletes every cached copy of source in a namespace keep accepts.
func deleteCopies(source *kw.ObjectMeta, keep func(string) bool) error {
	of := source.Key()
	copies, err := kw.List(kw.ConfigMap, "", replica+"=true")
	if err != nil {
		return err
	}
	for _, c := range copies {
		m := c.Meta()
		if v, ok := m.Annotation(replicaOf); ok && v == of && m.Namespace != "" && keep(m.Namespace) {
			if err := kw.Delete(kw.RefTo(kw.ConfigMap, &m), kw.Background); err != nil {
				return err
			}
			kw.Info("copy deleted", "copy", m.Key(), "source", of)
		}
	}
	return nil
}

func all(string) bool { return true }

func (r *replicator) configMapChanged(d *kw.Delta) error {
	m, object, err := d.Parts()
	if err != nil {
		return err
	}
	if v, ok := m.Label(replica); ok && v == "true" {
		return nil
	}
	source := r.isSource(m)
	switch {
	case d.Type == kw.Deleted && source:
		return deleteCopies(m, all)
	case (d.Type == kw.Added || d.Type == kw.Resync || d.Type == kw.Updated) && source:
		return r.replicate(m, object)
	case d.Type == kw.Updated:
		if old := d.OldMeta(); old != nil && r.isSource(old) {
			return deleteCopies(m, all)
		}
	}
	return nil
}

func (r *replicator) replicate(m *kw.ObjectMeta, object *kw.Object) error {
	selector, err := r.selectorFor(m)
	if err != nil {
		return kw.Permanent(err.Error())
	}
	c, err := newCopy(m, object)
	if err != nil {
		return err
	}
	objects, err := kw.List(kw.Namespace, "", "")
	if err != nil {
		return err
	}
	namespaces := make([]kw.ObjectMeta, len(objects))
	for i, o := range objects {
		namespaces[i] = o.Meta()
	}
	var targets []string
	for _, ns := range namespaces {
		if !ns.IsTerminating() && ns.Name != m.Namespace && selector.Matches(ns.Labels) {
			targets = append(targets, ns.Name)
		}
	}
	for _, ns := range targets {
		if err := c.applyInto(ns); err != nil {
			return err
		}
	}
	stale := func(ns string) bool {
		return !slices.Contains(targets, ns) && slices.ContainsFunc(namespaces, func(n kw.ObjectMeta) bool {
			return n.Name == ns && !n.IsTerminating()
		})
	}
	if err := deleteCopies(m, stale); err != nil {
		return err
	}
	kw.Debug("replicated", "source", c.of, "namespaces", strconv.Itoa(len(targets)))
	return nil
}

func (r *replicator) namespaceChanged(d *kw.Delta) error {
	ns, _, err := d.Parts()
	if err != nil {
		return err
	}
	if d.Initial || ns.IsTerminating() {
		return nil
	}
	old := d.OldMeta()
	filter := ""
	if !r.source.IsEmpty() {
		filter = r.source.String()
	}
	sources, err := kw.List(kw.ConfigMap, "", filter)
	if err != nil {
		return err
	}
	for _, source := range sources {
		m := source.Meta()
		if !r.isSource(&m) || m.Namespace == ns.Name {
			continue
		}
		selector, err := r.selectorFor(&m)
		if err != nil {
			kw.Warn("source skipped", "source", m.Key(), "error", err.Error())
			continue
		}
		now := selector.Matches(ns.Labels)
		before := old != nil && selector.Matches(old.Labels)
		if now && !before {
			c, err := newCopy(&m, source)
			if err != nil {
				return err
			}
			if err := c.applyInto(ns.Name); err != nil {
				return err
			}
		} else if before && !now {
			if err := deleteCopies(&m, func(n string) bool { return n == ns.Name }); err != nil {
				return err
			}
		}
	}
	return nil
}

func init() { kw.Export(newReplicator) }

func main() {}
