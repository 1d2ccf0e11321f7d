package kubewasm

// Owner references: finding an object's owners, and making the objects a
// plugin creates owned by (and garbage-collected with) another.

// GVK is the owner's group/version/kind, from its apiVersion and kind.
func (o OwnerReference) GVK() GVK { return GVKFromAPIVersion(o.APIVersion, o.Kind) }

// Is reports whether the owner is of k's group and kind (any version).
func (o OwnerReference) Is(k KindRef) bool { return o.GVK().Is(k) }

// ControllerOf is a controller reference (Controller and
// BlockOwnerDeletion true) to the object of kind gvk named name with uid.
func ControllerOf(gvk GVK, name, uid string) OwnerReference {
	return OwnerReference{
		APIVersion:         gvk.APIVersion(),
		Kind:               gvk.Kind,
		Name:               name,
		UID:                uid,
		Controller:         true,
		BlockOwnerDeletion: true,
	}
}

// JSON is the reference as the API server writes it: apiVersion, kind,
// name, uid, then controller and blockOwnerDeletion only when true.
func (o OwnerReference) JSON() map[string]any {
	m := map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind, "name": o.Name, "uid": o.UID}
	if o.Controller {
		m["controller"] = true
	}
	if o.BlockOwnerDeletion {
		m["blockOwnerDeletion"] = true
	}
	return m
}

// FindOwnerIn returns the first of refs of k's group and kind (any
// version).
func FindOwnerIn(refs []OwnerReference, k KindRef) (OwnerReference, bool) {
	for _, r := range refs {
		if r.Is(k) {
			return r, true
		}
	}
	return OwnerReference{}, false
}

// FindOwner returns the first owner reference of o (in
// metadata.ownerReferences order) of k's group and kind, any version:
// FindOwner(pod, kubewasm.ReplicaSet). One host call.
func FindOwner(o *Object, k KindRef) (OwnerReference, bool) {
	return FindOwnerIn(o.OwnerReferences(), k)
}

// ControllerOwner returns o's owner reference marked controller, if any
// (one host call).
func ControllerOwner(o *Object) (OwnerReference, bool) { return o.Controller() }

// ControllerRef is a controller reference to o (its apiVersion, kind, name
// and uid; Controller and BlockOwnerDeletion true), to embed in what the
// plugin creates so that it is garbage-collected with o. Three host calls.
func ControllerRef(o *Object) OwnerReference {
	return ControllerOf(o.Kind(), o.Name(), o.UID())
}

// SetControllerReference makes owner the controller of the JSON object
// dependent (what you then Apply): SetOwnerReference with
// ControllerRef(owner).
func SetControllerReference(dependent map[string]any, owner *Object) error {
	return SetOwnerReference(dependent, ControllerRef(owner))
}

// SetOwnerReference adds ref to dependent's metadata.ownerReferences
// (creating metadata and the list as needed), replacing an entry for the
// same owner (same uid, or same group, kind and name). A permanent error
// when dependent is nil, its metadata or list is malformed, or ref is a
// controller and another owner already is (an object has at most one
// controller). Entries already in the list may be maps
// (map[string]any, as encoding/json decodes them) or OwnerReference values.
func SetOwnerReference(dependent map[string]any, ref OwnerReference) error {
	if dependent == nil {
		return Permanent("owner reference: the dependent is nil")
	}
	meta, ok := dependent["metadata"]
	if !ok || meta == nil {
		meta = map[string]any{}
		dependent["metadata"] = meta
	}
	m, ok := meta.(map[string]any)
	if !ok {
		return Permanent("owner reference: metadata is not a JSON object")
	}
	var list []any
	switch l := m["ownerReferences"].(type) {
	case nil:
	case []any:
		list = l
	case []OwnerReference:
		for _, r := range l {
			list = append(list, r.JSON())
		}
	case []map[string]any:
		for _, r := range l {
			list = append(list, r)
		}
	default:
		return Permanent("owner reference: metadata.ownerReferences is not a list")
	}
	gvk := ref.GVK()
	same := func(entry any) bool {
		e := ownerFields(entry)
		return e.UID == ref.UID ||
			(e.GVK().Group == gvk.Group && e.Kind == ref.Kind && e.Name == ref.Name)
	}
	if ref.Controller {
		for _, entry := range list {
			if e := ownerFields(entry); e.Controller && !same(entry) {
				return Permanentf("owner reference: already controlled by %s %s", e.Kind, e.Name)
			}
		}
	}
	replaced := false
	for i, entry := range list {
		if same(entry) {
			list[i] = ref.JSON()
			replaced = true
			break
		}
	}
	if !replaced {
		list = append(list, ref.JSON())
	}
	m["ownerReferences"] = list
	return nil
}

// ownerFields reads an entry of an ownerReferences list (a map as
// encoding/json decodes it, or an OwnerReference); missing or mistyped
// fields read as empty.
func ownerFields(entry any) OwnerReference {
	switch e := entry.(type) {
	case OwnerReference:
		return e
	case *OwnerReference:
		if e != nil {
			return *e
		}
	case map[string]any:
		s := func(k string) string { v, _ := e[k].(string); return v }
		b := func(k string) bool { v, _ := e[k].(bool); return v }
		return OwnerReference{
			APIVersion: s("apiVersion"), Kind: s("kind"), Name: s("name"), UID: s("uid"),
			Controller: b("controller"), BlockOwnerDeletion: b("blockOwnerDeletion"),
		}
	}
	return OwnerReference{}
}
