//go:build wasip1

// parse-all in Go: plugins/testing/parse-all's twin (see its README.md and
// plugins/bench-logic): per Pod delta, the whole object from ToJSON decoded
// with encoding/json into a map[string]any (a whole tree, as client-go's
// unstructured objects; a struct of the few fields read would let the
// decoder skip the rest), the same decision as bench_logic::evaluate and
// its merge patch, when there is one, as the only action. Config
// `{"repeat": N}` (default 1) runs the decision N times.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	kw "kubewasm/plugins/sdk"
)

const annotation = "kubewasm.io/health"

type parseAll struct{ repeat int }

type config struct {
	Repeat int `json:"repeat"`
}

func newParseAll(ctx kw.Context) (kw.Plugin, error) {
	c := config{Repeat: 1}
	if err := ctx.ParseConfig(&c); err != nil {
		return nil, err
	}
	if c.Repeat < 0 {
		return nil, fmt.Errorf("invalid config: repeat must be a count, not %d", c.Repeat)
	}
	return &parseAll{repeat: c.Repeat}, nil
}

func (*parseAll) Registration() kw.Registration {
	return kw.Registration{}.
		Subscribe(
			kw.Subscribe(kw.Pod).WithDeltas(kw.Added, kw.Updated, kw.Resync),
			kw.Subscribe(kw.Node).CacheOnly(),
		).
		Write(kw.Pod)
}

func object(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func hasMemoryLimit(c map[string]any) bool {
	_, ok := object(object(c["resources"])["limits"])["memory"]
	return ok
}

// evaluate is bench_logic::evaluate: the merge patch reporting restarts,
// containers without a memory limit and a phase other than Running or
// Succeeded, or nil when there is nothing to report.
func evaluate(text string) (map[string]any, error) {
	var pod map[string]any
	if err := json.Unmarshal([]byte(text), &pod); err != nil {
		return nil, kw.Permanentf("not a Pod: %v", err)
	}
	spec, status := object(pod["spec"]), object(pod["status"])
	var restarts int64
	for _, key := range []string{"containerStatuses", "initContainerStatuses"} {
		for _, c := range list(status[key]) {
			n, _ := object(c)["restartCount"].(float64)
			restarts += int64(n)
		}
	}
	var unlimited []string
	for _, key := range []string{"containers", "initContainers"} {
		for _, c := range list(spec[key]) {
			if !hasMemoryLimit(object(c)) {
				name, _ := object(c)["name"].(string)
				unlimited = append(unlimited, name)
			}
		}
	}
	phase, ok := status["phase"].(string)
	if !ok {
		phase = "Unknown"
	}
	if restarts == 0 && len(unlimited) == 0 && (phase == "Running" || phase == "Succeeded") {
		return nil, nil
	}
	node, ok := spec["nodeName"].(string)
	if !ok {
		node = "-"
	}
	names := "-"
	if len(unlimited) > 0 {
		names = strings.Join(unlimited, ",")
	}
	summary := fmt.Sprintf("phase=%s node=%s restarts=%d unlimited=%s", phase, node, restarts, names)
	return kw.AnnotationsPatch(map[string]string{annotation: summary}), nil
}

func (p *parseAll) Handle(d *kw.Delta) (kw.Handled, error) {
	if d.Type == kw.Synced {
		return kw.Done, nil
	}
	pod, err := d.RequireObject()
	if err != nil {
		return kw.Done, err
	}
	text := pod.ToJSON()
	var decided map[string]any
	for range p.repeat {
		if decided, err = evaluate(text); err != nil {
			return kw.Done, err
		}
	}
	if decided == nil {
		return kw.Done, nil
	}
	return kw.Done, kw.PatchMerge(d.Ref(kw.Pod), decided, kw.UIDPrecondition(d.UID))
}

func init() { kw.Export(newParseAll) }

func main() {}
