package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/jsonpath"
	sigsyaml "sigs.k8s.io/yaml"
)

// runApply is the `apply` subcommand: `kubectl apply --server-side -f -`
// for the demo and for machines without kubectl. It reads multi-document
// YAML from stdin and server-side applies each object (field manager
// --field-manager, conflicts forced) with the kubeconfig given.
func runApply(args []string) int {
	fs := flag.NewFlagSet("kubewasm-controlplane apply", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (required)")
	manager := fs.String("field-manager", "kubewasm-controlplane", "server-side apply field manager")
	_ = fs.Parse(args)
	if *kubeconfig == "" {
		fs.Usage()
		return 2
	}
	if err := apply(*kubeconfig, *manager, os.Stdin); err != nil {
		logf("apply: %v", err)
		return 1
	}
	return 0
}

func apply(kubeconfig, manager string, in io.Reader) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	force := true
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		j, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			return err
		}
		if err := obj.UnmarshalJSON(j); err != nil {
			return err
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = client.Resource(mapping.Resource)
		if mapping.Scope.Name() == "namespace" {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = client.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, j,
			metav1.PatchOptions{FieldManager: manager, Force: &force}); err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		fmt.Printf("%s/%s applied\n", mapping.Resource.Resource, obj.GetName())
	}
}

// runGet is the `get` subcommand, for scripts on machines without kubectl:
// `get --kubeconfig KC RESOURCE NAME NAMESPACE JSONPATH` prints the
// JSONPath of one object ("" for a cluster-scoped one's namespace), and
// nothing when it does not exist. RESOURCE is plural[.group].
func runGet(args []string) int {
	fs := flag.NewFlagSet("kubewasm-controlplane get", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (required)")
	_ = fs.Parse(args)
	if *kubeconfig == "" || fs.NArg() != 4 {
		fmt.Fprintln(os.Stderr, "usage: kubewasm-controlplane get --kubeconfig KC RESOURCE NAME NAMESPACE JSONPATH")
		return 2
	}
	resource, name, ns, path := fs.Arg(0), fs.Arg(1), fs.Arg(2), fs.Arg(3)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		logf("get: %v", err)
		return 1
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		logf("get: %v", err)
		return 1
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	gvr, err := mapper.ResourceFor(schema.ParseGroupResource(resource).WithVersion(""))
	if err != nil {
		logf("get: %s: %v", resource, err)
		return 1
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		logf("get: %v", err)
		return 1
	}
	var ri dynamic.ResourceInterface = client.Resource(gvr)
	if ns != "" {
		ri = client.Resource(gvr).Namespace(ns)
	}
	obj, err := ri.Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0
	}
	if err != nil {
		logf("get: %v", err)
		return 1
	}
	jp := jsonpath.New("get").AllowMissingKeys(true)
	if err := jp.Parse(path); err != nil {
		logf("get: %v", err)
		return 2
	}
	if err := jp.Execute(os.Stdout, obj.Object); err != nil {
		logf("get: %v", err)
		return 1
	}
	fmt.Println()
	return 0
}
