// config-replicator in Go: the same config, registration and actions as
// plugins/config-replicator (see its README.md): copies source ConfigMaps
// (matching a label selector) into every namespace matching another
// selector, keeps the copies in step with their source, and deletes them
// when the source goes.
package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	kw "kubewasm/plugins/sdk"
)

const (
	// replica labels every copy; objects carrying it are never replicated.
	replica = "kubewasm.io/replica"
	// replicaOf annotates every copy: `<namespace>/<name>` of its source.
	replicaOf = "kubewasm.io/replica-of"
	// replicatedBy annotates every copy: the name of the plugin that made
	// it. A replicator deletes only its own copies, so replicators with
	// different selectors share a cluster.
	replicatedBy = "kubewasm.io/replicated-by"
	// replicateTo on a source overrides the configured namespace selector.
	replicateTo = "kubewasm.io/replicate-to"
)

// Subscription indexes, in registration order.
const (
	configMaps = 0
	namespaces = 1
)

type config struct {
	SourceSelector    string `json:"sourceSelector"`
	NamespaceSelector string `json:"namespaceSelector"`
}

type replicator struct {
	// me is this plugin's name, recorded on its copies.
	me     string
	source *kw.LabelSelector
	// sourceFilter is source's canonical text, the filter of the cache
	// lists of sources ("" for the empty selector).
	sourceFilter string
	namespaces   *kw.LabelSelector
}

func newReplicator(ctx kw.Context) (kw.Plugin, error) {
	c := config{SourceSelector: "kubewasm.io/replicate=true"}
	if err := ctx.ParseConfig(&c); err != nil {
		return nil, err
	}
	source, err := kw.ParseSelector(c.SourceSelector)
	if err != nil {
		return nil, fmt.Errorf("invalid config: sourceSelector: %w", err)
	}
	namespaces, err := kw.ParseSelector(c.NamespaceSelector)
	if err != nil {
		source.Close()
		return nil, fmt.Errorf("invalid config: namespaceSelector: %w", err)
	}
	return &replicator{me: ctx.Name, source: source, sourceFilter: source.String(), namespaces: namespaces}, nil
}

func (r *replicator) Registration() kw.Registration {
	return kw.Registration{}.
		Subscribe(
			kw.Subscribe(kw.ConfigMap).
				WithDeltas(kw.Added, kw.Updated, kw.Deleted, kw.Resync).
				WithFields("/data", "/binaryData"),
			kw.Subscribe(kw.Namespace).
				WithDeltas(kw.Added, kw.Updated).
				WithFields("/metadata/labels"),
		).
		Write(kw.ConfigMap)
}

func (r *replicator) Handle(d *kw.Delta) (kw.Handled, error) {
	var err error
	switch {
	case d.Type == kw.Synced:
	case d.Subscription == namespaces:
		err = r.namespaceChanged(d)
	case d.Subscription == configMaps:
		err = r.configMapChanged(d)
	}
	return kw.Done, err
}

func isReplica(o *kw.Object) bool {
	v, ok := o.Label(replica)
	return ok && v == "true"
}

func (r *replicator) isSource(o *kw.Object) bool {
	return !isReplica(o) && r.source.MatchesObject(o)
}

// ownSelector is the namespace selector a source names in its annotation,
// parsed (nil: it names none, the config's applies). Close it after use.
func ownSelector(source *kw.Object) (*kw.LabelSelector, error) {
	text, ok := source.Annotation(replicateTo)
	if !ok {
		return nil, nil
	}
	s, err := kw.ParseSelector(text)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", replicateTo, source.Key(), err)
	}
	return s, nil
}

// copyOf is what a copy is made of: the source's name, key, data and
// binaryData, and the replicator that makes it.
type copyOf struct {
	name, of, by string
	data         map[string]json.RawMessage
}

func newCopy(name, key, by string, source *kw.Object) (*copyOf, error) {
	c := &copyOf{name: name, of: key, by: by, data: map[string]json.RawMessage{}}
	for _, f := range [][2]string{{"binaryData", "/binaryData"}, {"data", "/data"}} {
		v, ok := source.Field(f[1])
		if !ok || v.Kind == kw.FieldNull {
			continue
		}
		// Objects come back as their JSON text: embedded as is, never parsed.
		if !v.IsObject() {
			return nil, kw.Permanentf("%s has a non-object %s", key, f[0])
		}
		c.data[f[0]] = v.RawJSON()
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
			"annotations": map[string]string{replicaOf: c.of, replicatedBy: c.by},
		},
	}
	for k, v := range c.data {
		object[k] = v
	}
	return kw.Apply(object, true, kw.NoPreconditions)
}

func (r *replicator) configMapChanged(d *kw.Delta) error {
	object, err := d.RequireObject()
	if err != nil {
		return err
	}
	if isReplica(object) {
		return r.copySeen(d, object)
	}
	source := r.isSource(object)
	switch {
	case d.Type == kw.Deleted && source:
		return r.deleteCopies(d.Key(), all)
	case (d.Type == kw.Added || d.Type == kw.Resync || d.Type == kw.Updated) && source:
		return r.replicate(d, object)
	case d.Type == kw.Updated && d.OldObject != nil && r.isSource(d.OldObject):
		// No longer a source (labels changed): its copies go.
		return r.deleteCopies(d.Key(), all)
	}
	return nil
}

// copySeen deletes a copy of ours whose source is gone (or no longer a
// source).
// Level, not edge: a source deleted while no replica led (a leadership
// handover, a restart) never arrives as a delete; the next leader's replay
// of the copies finds the orphans.
func (r *replicator) copySeen(d *kw.Delta, copy *kw.Object) error {
	if d.Type == kw.Deleted || !r.isMine(copy) {
		return nil
	}
	of, ok := copy.Annotation(replicaOf)
	if !ok {
		return nil
	}
	ns, name, ok := strings.Cut(of, "/")
	if !ok {
		return nil
	}
	source, err := kw.Get(kw.ConfigMap, ns, name)
	if err != nil {
		return err
	}
	if source != nil && r.isSource(source) {
		return nil
	}
	if err := kw.Delete(d.Ref(kw.ConfigMap), kw.Background, kw.UIDPrecondition(d.UID)); err != nil {
		return err
	}
	kw.Info("orphan copy deleted", "copy", d.Key(), "source", ns+"/"+name)
	return nil
}

// replicate applies the source into each target namespace (by name), then
// deletes its copies in namespaces that exist, are not terminating and are
// no longer targets.
func (r *replicator) replicate(d *kw.Delta, object *kw.Object) error {
	own, err := ownSelector(object)
	if err != nil {
		return kw.Permanent(err.Error())
	}
	defer own.Close()
	selector := r.namespaces
	if own != nil {
		selector = own
	}
	c, err := newCopy(d.Name, d.Key(), r.me, object)
	if err != nil {
		return err
	}
	namespaces, err := kw.List(kw.Namespace, "", "")
	if err != nil {
		return err
	}
	// The live (not terminating) namespaces, by name, and the targets among
	// them: matching the source's selector, not its own namespace.
	var live, targets []string
	for _, ns := range namespaces {
		if !ns.IsTerminating() {
			name := ns.Name()
			live = append(live, name)
			if selector.MatchesObject(ns) && name != d.Namespace {
				targets = append(targets, name)
			}
		}
		ns.Release()
	}
	for _, ns := range targets {
		if err := c.applyInto(ns); err != nil {
			return err
		}
	}
	stale := func(ns string) bool { return !slices.Contains(targets, ns) && slices.Contains(live, ns) }
	if err := r.deleteCopies(c.of, stale); err != nil {
		return err
	}
	kw.Debug("replicated", "source", c.of, "namespaces", strconv.Itoa(len(targets)))
	return nil
}

// namespaceChanged: a live namespace appeared or changed labels: copies
// every source it now matches (and did not before) into it, and deletes the
// copies of sources it no longer matches. Initial namespaces are covered by
// the sources' own initial deltas.
func (r *replicator) namespaceChanged(d *kw.Delta) error {
	ns, err := d.RequireObject()
	if err != nil {
		return err
	}
	if d.Initial || ns.IsTerminating() {
		return nil
	}
	name := d.Name
	sources, err := kw.List(kw.ConfigMap, "", r.sourceFilter)
	if err != nil {
		return err
	}
	for _, source := range sources {
		if err := r.sourceForNamespace(d, ns, name, source); err != nil {
			return err
		}
		source.Release()
	}
	return nil
}

func (r *replicator) sourceForNamespace(d *kw.Delta, ns *kw.Object, name string, source *kw.Object) error {
	if !r.isSource(source) || source.Namespace() == name {
		return nil
	}
	own, err := ownSelector(source)
	if err != nil {
		kw.Warn("source skipped", "source", source.Key(), "error", err.Error())
		return nil
	}
	defer own.Close()
	selector := r.namespaces
	if own != nil {
		selector = own
	}
	now := selector.MatchesObject(ns)
	before := d.OldObject != nil && selector.MatchesObject(d.OldObject)
	switch {
	case now && !before:
		c, err := newCopy(source.Name(), source.Key(), r.me, source)
		if err != nil {
			return err
		}
		return c.applyInto(name)
	case before && !now:
		key := source.Key()
		return r.deleteCopies(key, func(n string) bool { return n == name })
	}
	return nil
}

func all(string) bool { return true }

// isMine says whether this replicator made copy; another replicator's, or
// one made before copies were marked, is left alone.
func (r *replicator) isMine(copy *kw.Object) bool {
	by, ok := copy.Annotation(replicatedBy)
	return ok && by == r.me
}

// deleteCopies deletes (background, guarded by the copy's uid) every cached
// copy of ours of the source whose key is of in a namespace keep accepts, in
// namespace order.
func (r *replicator) deleteCopies(of string, keep func(string) bool) error {
	copies, err := kw.List(kw.ConfigMap, "", replica+"=true")
	if err != nil {
		return err
	}
	for _, c := range copies {
		if v, ok := c.Annotation(replicaOf); ok && v == of && r.isMine(c) {
			if ns := c.Namespace(); ns != "" && keep(ns) {
				err := kw.Delete(kw.RefToObject(kw.ConfigMap, c), kw.Background, kw.UIDPrecondition(c.UID()))
				if err != nil {
					return err
				}
				kw.Info("copy deleted", "copy", c.Key(), "source", of)
			}
		}
		c.Release()
	}
	return nil
}

func init() { kw.Export(newReplicator) }

func main() {}
