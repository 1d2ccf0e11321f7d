// kstatus prints the status that sigs.k8s.io/cli-utils computes for one
// Kubernetes object (what kpt, Flux and cli-utils' apply wait for) as one
// JSON line:
//
//	{"status":"Current","message":"Resource is current"}
//
// The object is read as JSON or YAML from the file named by the only
// argument, or from stdin when there is none or it is "-".
//
//	kstatus plugin.json
//	kubectl get plugin/x -o json | kstatus
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type output struct {
	Status     status.Status      `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions,omitempty"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var in io.Reader = os.Stdin
	switch {
	case len(args) > 1:
		return fmt.Errorf("usage: kstatus [FILE|-] (one object, JSON or YAML)")
	case len(args) == 1 && args[0] != "-":
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	raw, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	doc, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fmt.Errorf("not one object in JSON or YAML: %w", err)
	}
	// apimachinery's decoding: integers stay int64, as kstatus reads them.
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(doc); err != nil {
		return fmt.Errorf("not one object: %w", err)
	}
	res, err := status.Compute(obj)
	if err != nil {
		return err
	}
	line, err := json.Marshal(output{res.Status, res.Message, res.Conditions})
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
