// Package kubewasm is the SDK for kubewasm plugins written in Go: WIT
// kubewasm:plugin@0.2.0 (wit/v0.2.0/plugin.wit), GOOS=wasip1, wrapped into
// a component with the WASI preview1 reactor adapter (see
// plugins/build-languages.sh, or build.sh in a `kubewasm new --lang go`
// project).
//
// A plugin calls Export from an init function with a constructor that
// receives the plugin's Context (name, version, config JSON); the Plugin it
// returns answers Registration once, then Handle once per delta:
//
//	func init() { kubewasm.Export(newPlugin) }
//	func main() {}
//
//	func newPlugin(ctx kubewasm.Context) (kubewasm.Plugin, error) { ... }
//	func (p *myPlugin) Registration() kubewasm.Registration { ... }
//	func (p *myPlugin) Handle(d *kubewasm.Delta) (kubewasm.Handled, error) { ... }
//
// Objects are lazy: a Delta carries the scalars most handlers need
// (Namespace, Name, UID, ResourceVersion, Attempt, LastFailure) and
// *Object handles; every Object method (Label, Annotation,
// OwnerReferences, Field, Meta, ...) is one host call that copies only what
// it returns. Handles are valid during the Handle call that received them:
// the SDK drops them all when Handle returns (Object.Release drops one
// earlier). Label selectors are parsed and matched by the host
// (ParseSelector), with the API server's grammar.
//
// Outcomes: return Done, or RequeueAfter(d) to see the object again as a
// Requeue delta; return Retry(msg) for a transient failure (retried with
// backoff), Permanent(msg) for one retrying cannot fix (a dead letter). Any
// other error, and a panic, is permanent. Cache reads and actions the host
// refuses (not subscribed, not declared in Writes, not granted by the
// sidecar, malformed) return permanent errors. Actions are buffered and run
// in order after Handle returns without an error.
//
// Everything but the canonical-ABI glue (abi.go, wasip1 only) also builds
// on the host, so `go test ./sdk` runs the unit tests and `go doc -all
// ./sdk` prints this reference.
package kubewasm

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"
)

// ---- the plugin ------------------------------------------------------------

// Plugin is a loaded plugin version, built by the constructor given to
// Export. The value lives as long as the component instance: keep parsed
// configuration (label selectors) and state in it.
type Plugin interface {
	// Registration is called once, right after the constructor.
	Registration() Registration
	// Handle handles one delta. Deltas of one object arrive in order, one
	// at a time. Actions emitted during the call run after it returns a
	// nil error and are dropped otherwise.
	Handle(d *Delta) (Handled, error)
}

// Context is who the plugin is, as the host loaded it.
type Context struct {
	// Name is the plugin's file name without `.wasm`: the field manager is
	// `kubewasm/<Name>`, Events carry it as their action.
	Name string
	// Version is the first 12 hex digits of the component's SHA-256.
	Version string
	// Config is the `config` section of the plugin's sidecar as JSON (`{}`
	// when absent).
	Config string
}

// ParseConfig decodes c.Config into v, as ParseConfig does.
func (c Context) ParseConfig(v any) error { return ParseConfig(c.Config, v) }

// FieldManager is the field manager the host applies and patches with:
// `kubewasm/<Name>`.
func (c Context) FieldManager() string { return "kubewasm/" + c.Name }

var (
	factory func(ctx Context) (Plugin, error)
	plugin  Plugin
)

// Export sets the constructor the host's register calls with the plugin's
// Context; call it from an init function. An error refuses this version
// (the host keeps the previous one serving) and becomes the host's error
// message.
func Export(newPlugin func(ctx Context) (Plugin, error)) { factory = newPlugin }

// ParseConfig decodes the config JSON into v (a pointer to a struct with
// json tags, its defaults already set): "", whitespace and `null` keep the
// defaults, unknown keys and wrong types are errors reading
// `invalid config: ...`.
func ParseConfig(config string, v any) error {
	t := strings.TrimSpace(config)
	if t == "" || t == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	if dec.More() {
		return errors.New("invalid config: trailing data after the JSON value")
	}
	return nil
}

// register runs the host's register: the constructor, then Registration.
func register(ctx Context) (reg Registration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v%s", r, panicSite())
		}
		dropOwned()
	}()
	if factory == nil {
		return Registration{}, errors.New("no plugin exported: call kubewasm.Export from an init function")
	}
	p, err := factory(ctx)
	if err != nil {
		return Registration{}, err
	}
	if p == nil {
		return Registration{}, errors.New("the plugin constructor returned no plugin")
	}
	plugin = p
	return p.Registration(), nil
}

// handle runs the host's handle; every handle received during the call is
// dropped when it returns.
func handle(d *Delta) (h Handled, err error) {
	defer func() {
		if r := recover(); r != nil {
			h, err = Done, Permanent(fmt.Sprint("panic: ", r, panicSite()))
		}
		dropOwned()
	}()
	if plugin == nil {
		return Done, Permanent("handle called before register")
	}
	return plugin.Handle(d)
}

// panicSite says where the panic being recovered was raised, as
// " (at FUNCTION, FILE:LINE)": called from the deferred function that
// recovers, the panicking frames are still on the stack, between
// runtime.gopanic and this SDK's handle or register. The first of them
// outside the Go runtime and this SDK is the plugin's own code (a panic the
// SDK raises, such as an object used after its call, is the caller's); the
// file is module-relative when built with -trimpath.
func panicSite() string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	self := sdkPrefix()
	var first *runtime.Frame
	panicking := false
	for {
		f, more := frames.Next()
		if f.Function == self+"handle" || f.Function == self+"register" {
			break // the export that recovers: the plugin's frames are above it
		}
		if panicking && !strings.HasPrefix(f.Function, "runtime.") {
			if !strings.HasPrefix(f.Function, self) {
				return fmt.Sprintf(" (at %s, %s:%d)", f.Function, f.File, f.Line)
			}
			if first == nil {
				first = &f
			}
		}
		panicking = panicking || f.Function == "runtime.gopanic"
		if !more {
			break
		}
	}
	if first != nil {
		return fmt.Sprintf(" (at %s, %s:%d)", first.Function, first.File, first.Line)
	}
	return ""
}

// sdkPrefix is this package's path and a dot ("example.com/x/sdk."): the
// prefix of its functions' names.
func sdkPrefix() string {
	pc, _, _, _ := runtime.Caller(0)
	name := runtime.FuncForPC(pc).Name() // "path/sdk.sdkPrefix"
	return strings.TrimSuffix(name, "sdkPrefix")
}

// ---- outcomes --------------------------------------------------------------

// Handled is how a handled delta ended: Done, or RequeueAfter.
type Handled struct {
	requeue bool
	ms      uint64
}

// Done: the delta is handled; nothing more until the object changes (or
// resyncs).
var Done = Handled{}

// RequeueAfter: done for now; deliver this object again as a Requeue delta
// after d (in whole milliseconds, rounded down; negative is 0), unless a
// newer delta of it comes first (it replaces the requeue).
func RequeueAfter(d time.Duration) Handled {
	if d < 0 {
		d = 0
	}
	return Handled{requeue: true, ms: uint64(d / time.Millisecond)}
}

// RequeueDelay returns the delay asked for and whether there is one.
func (h Handled) RequeueDelay() (time.Duration, bool) {
	if !h.requeue {
		return 0, false
	}
	if h.ms > uint64(1<<63-1)/uint64(time.Millisecond) {
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(h.ms) * time.Millisecond, true
}

// HandlerError is an error Handle returns: Retry ones are retried with
// backoff, the others are permanent (dead letters).
type HandlerError struct {
	Retry bool
	Msg   string
	cause error
}

// Error is the message the host records.
func (e *HandlerError) Error() string { return e.Msg }

// Unwrap is the error the host reported (a *CacheError or *ActionError),
// if any.
func (e *HandlerError) Unwrap() error { return e.cause }

// Permanent is an error retrying will not fix: the delta is not retried
// and is recorded as a dead letter.
func Permanent(msg string) error { return &HandlerError{Msg: msg} }

// Permanentf is Permanent with fmt.Sprintf.
func Permanentf(format string, args ...any) error {
	return &HandlerError{Msg: fmt.Sprintf(format, args...)}
}

// Retry is a transient error: the delta is retried with backoff; the next
// attempt's Delta.Attempt is 2, 3, ... and its LastFailure says
// FailureRetry with msg.
func Retry(msg string) error { return &HandlerError{Retry: true, Msg: msg} }

// Retryf is Retry with fmt.Sprintf.
func Retryf(format string, args ...any) error {
	return &HandlerError{Retry: true, Msg: fmt.Sprintf(format, args...)}
}

// IsRetry reports whether err asks for a retry (a Retry error anywhere in
// its chain); every other error is permanent.
func IsRetry(err error) bool {
	var h *HandlerError
	return errors.As(err, &h) && h.Retry
}

// ---- log -------------------------------------------------------------------

// Level is a log level.
type Level uint8

// The log levels, lowest first; the host's RUST_LOG decides which are
// written (LogEnabled).
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// LogEnabled reports whether a record at level would be written: check
// before building a costly message.
func LogEnabled(level Level) bool { return theHost().logEnabled(level) }

// Log writes a record into the host's log (tagged with the plugin's name)
// with fields given as key, value, key, value... (an odd last key gets an
// empty value). Nothing is copied to the host when the level is off.
func Log(level Level, msg string, kv ...string) {
	h := theHost()
	if !h.logEnabled(level) {
		return
	}
	fields := make([]Pair, 0, (len(kv)+1)/2)
	for i := 0; i < len(kv); i += 2 {
		p := Pair{Key: kv[i]}
		if i+1 < len(kv) {
			p.Value = kv[i+1]
		}
		fields = append(fields, p)
	}
	h.logWrite(level, msg, fields)
}

// Trace logs at trace level (see Log).
func Trace(msg string, kv ...string) { Log(LevelTrace, msg, kv...) }

// Debug logs at debug level (see Log).
func Debug(msg string, kv ...string) { Log(LevelDebug, msg, kv...) }

// Info logs at info level (see Log).
func Info(msg string, kv ...string) { Log(LevelInfo, msg, kv...) }

// Warn logs at warn level (see Log).
func Warn(msg string, kv ...string) { Log(LevelWarn, msg, kv...) }

// Error logs at error level (see Log).
func Error(msg string, kv ...string) { Log(LevelError, msg, kv...) }

// ---- clock -----------------------------------------------------------------

// Now is the host's wall clock (the plugin has no clock of its own: WASI
// clocks are not granted by default).
func Now() time.Time {
	s, ns := theHost().now()
	return time.Unix(s, int64(ns))
}

// NowUnix is the host's wall clock as seconds and nanoseconds since the
// Unix epoch.
func NowUnix() (int64, uint32) { return theHost().now() }

// NowRFC3339 is the host's wall clock as RFC 3339 with seconds precision
// (`2026-11-22T17:00:00Z`), the format Kubernetes timestamps use.
func NowRFC3339() string { return theHost().nowRFC3339() }
