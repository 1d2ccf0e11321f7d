// Command client-go-informer is the client-go baseline of the kubewasm
// initial-sync benchmark: one SharedInformerFactory with the typed Pod
// informer, a no-op event handler, and one SYNCED line on stdout once the
// informer (and its handler) has seen the initial state of the cluster.
// On SIGUSR1 it forces a garbage collection and prints its live heap on one
// HEAP line; --strip-managed-fields drops managedFields before objects are
// stored (the transform controller-runtime users set).
//
// See README.md for the output format and how --initial-list works.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	clientfeatures "k8s.io/client-go/features"
)

// clientGoVersion is the client-go release this module pins (go.mod); it is
// reported in the SYNCED line.
const clientGoVersion = "v0.35.8"

// ---------------------------------------------------------------------------
// WatchListClient feature gate

// watchListGate overrides client-go's WatchListClient feature gate and
// delegates every other feature to the gates it replaces (by default the
// KUBE_FEATURE_* environment-variable gates).
type watchListGate struct {
	clientfeatures.Gates
	watchList bool
}

func (g watchListGate) Enabled(key clientfeatures.Feature) bool {
	if key == clientfeatures.WatchListClient {
		return g.watchList
	}
	return g.Gates.Enabled(key)
}

// setWatchListClient forces client-go's WatchListClient gate on or off. It
// must run before any informer (reflector) is created: reflectors read the
// gate once, in NewReflector. ReplaceFeatureGates is client-go's supported
// API for taking control of its gates; it overrides KUBE_FEATURE_WatchListClient.
func setWatchListClient(enabled bool) error {
	clientfeatures.ReplaceFeatureGates(watchListGate{Gates: clientfeatures.FeatureGates(), watchList: enabled})
	if got := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient); got != enabled {
		return fmt.Errorf("client-go feature gate WatchListClient is %v after setting it to %v", got, enabled)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Request counting

// countingTransport counts the API requests the informer's client sends: a
// GET with watch=true (or 1) is a watch, any other GET is a list (one per
// page). Requests are counted when sent, not when answered.
type countingTransport struct {
	next    http.RoundTripper
	list    atomic.Int64
	watch   atomic.Int64
	other   atomic.Int64
	logReqs bool

	// synced is set once the initial sync is done. Before that, a request
	// that fails outright (server unreachable, TLS error) or is refused
	// (401, 403) is fatal: client-go itself would retry it forever.
	synced atomic.Bool
}

func (t *countingTransport) checkInitial(req *http.Request, resp *http.Response, err error) {
	if t.synced.Load() || req.Context().Err() != nil {
		return
	}
	switch {
	case err != nil:
		fatalf("initial %s %s failed: %v", req.Method, req.URL.Redacted(), err)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		fatalf("initial %s %s refused: %s (check the kubeconfig's credentials)", req.Method, req.URL.Redacted(), resp.Status)
	}
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := "other"
	if req.Method == http.MethodGet {
		if w, err := strconv.ParseBool(req.URL.Query().Get("watch")); err == nil && w {
			kind = "watch"
			t.watch.Add(1)
		} else {
			kind = "list"
			t.list.Add(1)
		}
	} else {
		t.other.Add(1)
	}
	resp, err := t.next.RoundTrip(req)
	t.checkInitial(req, resp, err)
	if t.logReqs {
		status := fmt.Sprintf("error: %v", err)
		if err == nil {
			// Uncompressed: Go's transport asked for gzip and decompressed the body.
			status = fmt.Sprintf("%s, Content-Type %s, gzip %v", resp.Status, resp.Header.Get("Content-Type"), resp.Uncompressed)
		}
		fmt.Fprintf(os.Stderr, "client-go-informer: request %s: %s %s (Accept: %s) -> %s\n",
			kind, req.Method, req.URL.RequestURI(), req.Header.Get("Accept"), status)
	}
	return resp, err
}

// ---------------------------------------------------------------------------
// managedFields

// stripManagedFields is controller-runtime's cache.TransformStripManagedFields
// (pkg/cache, v0.22): client-go v0.35.8 has no such helper, only
// SharedIndexInformer.SetTransform, so the same function is written here.
// The nil check avoids allocating an empty slice on objects that have none.
func stripManagedFields(in any) (any, error) {
	if obj, err := meta.Accessor(in); err == nil && obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	return in, nil
}

// ---------------------------------------------------------------------------
// Output

type requestCounts struct {
	List  int64 `json:"list"`
	Watch int64 `json:"watch"`
}

// syncedReport is the JSON document of the SYNCED line; field order is the
// documented order.
type syncedReport struct {
	Program        string        `json:"program"`
	Version        string        `json:"version"`
	Mode           string        `json:"mode"`
	Strip          bool          `json:"strip_managed_fields"`
	Objects        int           `json:"objects"`
	HeapAllocBytes uint64        `json:"heap_alloc_bytes"`
	HeapInuseBytes uint64        `json:"heap_inuse_bytes"`
	Requests       requestCounts `json:"requests"`
}

// heapReport is the JSON document of a HEAP line: the heap right after a
// forced garbage collection.
type heapReport struct {
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	HeapAllocBytes uint64 `json:"heap_alloc_bytes"`
}

// printLiveHeap forces a collection (runtime.GC returns once marking and
// sweeping are done) and prints the heap left: HeapInuse counts the spans
// holding live objects, HeapAlloc the live objects themselves.
func printLiveHeap() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	line, err := json.Marshal(heapReport{HeapInuseBytes: ms.HeapInuse, HeapAllocBytes: ms.HeapAlloc})
	if err != nil {
		fatalf("encoding the heap report: %v", err)
	}
	if _, err := fmt.Fprintf(os.Stdout, "HEAP %s\n", line); err != nil {
		fatalf("writing to stdout: %v", err)
	}
}

// ---------------------------------------------------------------------------

type options struct {
	kubeconfig  string
	initialList string
	resource    string
	contentType string
	strip       bool
	exitAfter   bool
	syncTimeout time.Duration
	logRequests bool
	verbosity   int
}

func parseFlags() (options, error) {
	var o options
	fs := flag.NewFlagSet("client-go-informer", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig (required)")
	fs.StringVar(&o.initialList, "initial-list", "", "initial list of the informer: streaming (WatchList, sendInitialEvents=true) or paged (LIST limit=500, then WATCH) (required)")
	fs.StringVar(&o.resource, "resource", "pods", "resource to inform on; only pods is supported")
	fs.StringVar(&o.contentType, "content-type", "json", "wire format: json (forced, like kube-rs) or protobuf (client-go's own default for built-in types)")
	fs.BoolVar(&o.strip, "strip-managed-fields", false, "drop metadata.managedFields before objects are stored (SetTransform, as controller-runtime's TransformStripManagedFields)")
	fs.BoolVar(&o.exitAfter, "exit-after-sync", false, "exit 0 right after printing the SYNCED line")
	fs.DurationVar(&o.syncTimeout, "sync-timeout", 0, "give up (exit 1) if not synced within this time; 0 waits forever")
	fs.BoolVar(&o.logRequests, "log-requests", false, "log every API request (method, URL, Accept header) to stderr")
	fs.IntVar(&o.verbosity, "v", 0, "client-go (klog) log verbosity, to stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: client-go-informer --kubeconfig PATH --initial-list streaming|paged [--resource pods] [--content-type json|protobuf] [--strip-managed-fields] [--exit-after-sync]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.kubeconfig == "" {
		return o, errors.New("--kubeconfig is required")
	}
	switch o.initialList {
	case "streaming", "paged":
	case "":
		return o, errors.New("--initial-list is required (streaming or paged)")
	default:
		return o, fmt.Errorf("--initial-list must be streaming or paged, not %q", o.initialList)
	}
	if o.contentType != "json" && o.contentType != "protobuf" {
		return o, fmt.Errorf("--content-type must be json or protobuf, not %q", o.contentType)
	}
	if o.resource != "pods" {
		return o, fmt.Errorf("--resource %q is not supported (only pods)", o.resource)
	}
	return o, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "client-go-informer: error: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	o, err := parseFlags()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "client-go-informer: %v\n", err)
		os.Exit(2)
	}

	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", strconv.Itoa(o.verbosity))
	_ = klogFlags.Set("logtostderr", "true")

	// Before any informer exists: reflectors read the gate when created.
	if err := setWatchListClient(o.initialList == "streaming"); err != nil {
		fatalf("%v", err)
	}

	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		fatalf("loading kubeconfig %s: %v", o.kubeconfig, err)
	}
	// Wire format. client-go's generated clients for built-in types default
	// to protobuf (Accept: application/vnd.kubernetes.protobuf,application/json)
	// when the config leaves ContentType empty; an explicit ContentType turns
	// that off. kubewasm (kube-rs) speaks JSON, hence json by default.
	if o.contentType == "json" {
		config.ContentType = "application/json"
	}
	counter := &countingTransport{logReqs: o.logRequests}
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	})
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fatalf("creating the client from %s: %v", o.kubeconfig, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Installed before anything else runs, so that a SIGUSR1 never kills
	// the program; answered only after the SYNCED line.
	heapReq := make(chan os.Signal, 1)
	signal.Notify(heapReq, syscall.SIGUSR1)

	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Pods().Informer()
	if o.strip {
		if err := informer.SetTransform(stripManagedFields); err != nil {
			fatalf("setting the transform: %v", err)
		}
	}

	var adds atomic.Int64
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { adds.Add(1) },
		UpdateFunc: func(oldObj, newObj any) {},
		DeleteFunc: func(obj any) {},
	})
	if err != nil {
		fatalf("adding the event handler: %v", err)
	}

	// A failed list/watch before the initial sync is fatal (see also
	// countingTransport.checkInitial: the watch-list path retries connection
	// errors internally and never reports them here); after the sync,
	// client-go's default handling (log and retry with backoff) applies.
	if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if !counter.synced.Load() && ctx.Err() == nil {
			fatalf("initial list/watch of pods from %s failed: %v", config.Host, err)
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		fatalf("setting the watch error handler: %v", err)
	}

	factory.Start(ctx.Done())

	waitCtx := ctx
	if o.syncTimeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.syncTimeout)
		defer cancel()
	}
	// Synced = the informer's store holds the initial state and the handler
	// has been handed every initial Add.
	if !cache.WaitForCacheSync(waitCtx.Done(), informer.HasSynced, reg.HasSynced) {
		if ctx.Err() != nil {
			// Signalled before the sync finished.
			factory.Shutdown()
			os.Exit(0)
		}
		fatalf("pods not synced within %v", o.syncTimeout)
	}
	counter.synced.Store(true)

	// Heap figures first, so that counting the objects does not show in them.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	report := syncedReport{
		Program:        "client-go",
		Version:        clientGoVersion,
		Mode:           o.initialList,
		Strip:          o.strip,
		Objects:        len(informer.GetIndexer().ListKeys()),
		HeapAllocBytes: ms.HeapAlloc,
		HeapInuseBytes: ms.HeapInuse,
		Requests:       requestCounts{List: counter.list.Load(), Watch: counter.watch.Load()},
	}
	line, err := json.Marshal(report)
	if err != nil {
		fatalf("encoding the report: %v", err)
	}
	if _, err := fmt.Fprintf(os.Stdout, "SYNCED %s\n", line); err != nil {
		fatalf("writing to stdout: %v", err)
	}

	if o.initialList == "streaming" && report.Requests.List > 0 {
		fmt.Fprintf(os.Stderr, "client-go-informer: warning: streaming mode sent %d LIST request(s): the watch-list was refused and client-go fell back to a paged list\n", report.Requests.List)
	}
	if n := adds.Load(); n != int64(report.Objects) {
		fmt.Fprintf(os.Stderr, "client-go-informer: note: the handler saw %d adds, the store holds %d objects (objects changed during the sync)\n", n, report.Objects)
	}

	if o.exitAfter {
		os.Exit(0)
	}
	for ctx.Err() == nil {
		select {
		case <-heapReq:
			printLiveHeap()
		case <-ctx.Done():
		}
	}
	stop()
	// Stop the informer, but do not let a slow shutdown change the exit code.
	done := make(chan struct{})
	go func() { factory.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	os.Exit(0)
}
