// Command fieldselprobe answers field-selector questions with the real
// apimachinery (the version go.mod pins), for the differential test
// tests/tests/field_selectors.rs. It reads JSON values on stdin, each
//
//	{"selector": "metadata.name=a\\,b", "sets": [{"metadata.name": "a,b"}, {}]}
//
// and writes one JSON line per value, in order: what fields.ParseSelector
// says and, when it parses, String() and Matches on each field set:
//
//	{"ok": true, "string": "metadata.name=a\\,b", "matches": [true, false]}
//	{"ok": false, "error": "invalid selector: ..."}
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/fields"
)

type question struct {
	Selector string       `json:"selector"`
	Sets     []fields.Set `json:"sets"`
}

type answer struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	String  string `json:"string"`
	Matches []bool `json:"matches"`
}

func main() {
	in := json.NewDecoder(bufio.NewReader(os.Stdin))
	w := bufio.NewWriter(os.Stdout)
	out := json.NewEncoder(w)
	out.SetEscapeHTML(false)
	for {
		var q question
		if err := in.Decode(&q); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintf(os.Stderr, "fieldselprobe: reading stdin: %v\n", err)
			os.Exit(2)
		}
		a := answer{Matches: []bool{}}
		if sel, err := fields.ParseSelector(q.Selector); err != nil {
			a.Error = err.Error()
		} else {
			a.OK = true
			a.String = sel.String()
			for _, set := range q.Sets {
				a.Matches = append(a.Matches, sel.Matches(set))
			}
		}
		if err := out.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "fieldselprobe: writing stdout: %v\n", err)
			os.Exit(2)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "fieldselprobe: writing stdout: %v\n", err)
		os.Exit(2)
	}
}
