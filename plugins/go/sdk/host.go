package kubewasm

// hostAPI is the kubewasm host as the SDK sees it: one method per WIT
// import of kubewasm:plugin@0.2.0, in Go types. abi.go implements it over
// the canonical ABI (GOOS=wasip1 only); the package's tests implement a
// fake, so that everything above this seam builds and is tested on any
// platform with a plain `go test`.
//
// Conventions: namespace "" is none (cluster-scoped, or all namespaces),
// a label selector "" is none; handles are the canonical ABI's i32.
type hostAPI interface {
	// types: the object resource (self is a borrow).
	objectKind(h uint32) GVK
	objectNamespace(h uint32) string
	objectName(h uint32) string
	objectUID(h uint32) string
	objectResourceVersion(h uint32) string
	objectGeneration(h uint32) (int64, bool)
	objectLabel(h uint32, key string) (string, bool)
	objectLabels(h uint32) []Pair
	objectAnnotation(h uint32, key string) (string, bool)
	objectAnnotations(h uint32) []Pair
	objectOwnerReferences(h uint32) []OwnerReference
	objectController(h uint32) (OwnerReference, bool)
	objectFinalizers(h uint32) []string
	objectDeletionTimestamp(h uint32) (string, bool)
	objectMeta(h uint32) ObjectMeta
	objectField(h uint32, pointer string) (FieldValue, bool)
	objectFields(h uint32, pointers []string) []*FieldValue
	objectToJSON(h uint32) string
	objectDrop(h uint32)

	// selectors: the label-selector resource.
	selectorParse(text string) (uint32, error)
	selectorMatches(h uint32, labels []Pair) bool
	selectorMatchesObject(h, object uint32) bool
	selectorString(h uint32) string
	selectorDrop(h uint32)

	// cache: results are owned object handles.
	cacheGet(kind KindRef, namespace, name string) (uint32, bool, error)
	cacheList(kind KindRef, namespace, labelSelector string) ([]uint32, error)
	cacheByIndex(index, value string) ([]uint32, error)

	// actions
	apply(objectJSON string, force bool, pre Preconditions) error
	applyStatus(objectJSON string, pre Preconditions) error
	patch(target ObjectRef, t PatchType, patch string, pre Preconditions) error
	delete(target ObjectRef, p Propagation, pre Preconditions) error
	recordEvent(e EventRecord) error

	// log and clock
	logEnabled(level Level) bool
	logWrite(level Level, message string, fields []Pair)
	now() (int64, uint32)
	nowRFC3339() string
}

// host is set by abi.go's init in a wasip1 build, by tests elsewhere.
var host hostAPI

func theHost() hostAPI {
	if host == nil {
		panic("kubewasm: no host: host functions work only inside a component built with GOOS=wasip1")
	}
	return host
}
