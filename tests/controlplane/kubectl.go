//go:build !apiserveronly

package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/kubectl/pkg/cmd/get"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
)

// runKubectlGet is the `kubectl-get` subcommand: kubectl's own `get`
// command (k8s.io/kubectl, the code the kubectl binary runs), so tests check
// what an operator sees from `kubectl get` (printer columns through the
// server's Table output, -o wide, -o jsonpath) on machines without kubectl.
// Flags are kubectl's: `kubectl-get --kubeconfig KC plugins -o wide`.
func runKubectlGet(args []string) int {
	flags := genericclioptions.NewConfigFlags(true)
	f := cmdutil.NewFactory(flags)
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	cmd := get.NewCmdGet("kubectl", f, streams)
	flags.AddFlags(cmd.PersistentFlags())
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	if err := cmd.Execute(); err != nil {
		return 1
	}
	return 0
}
