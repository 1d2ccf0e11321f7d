//go:build wasip1

// noop in Go: plugins/testing/noop's twin (the floor of the per-delta
// overhead): subscribes to every Pod delta and does nothing.
package main

import kw "kubewasm/plugins/sdk"

type noop struct{}

func (noop) Registration() kw.Registration {
	return kw.Registration{}.Subscribe(
		kw.Subscribe(kw.Pod).WithDeltas(kw.Added, kw.Updated, kw.Deleted, kw.Resync, kw.Synced),
	)
}

func (noop) Handle(*kw.Delta) (kw.Handled, error) { return kw.Done, nil }

func init() { kw.Export(func(kw.Context) (kw.Plugin, error) { return noop{}, nil }) }

func main() {}
