//go:build !apiserveronly

package main

import (
	"context"

	"k8s.io/component-base/cli"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// The node-mode components, each the official command from k8s.io/kubernetes
// (cmd/<component>/app) run as a subcommand of this binary in its own child
// process: one binary and one link step for the whole cluster (the way
// hyperkube once bundled them), separate processes because every component
// keeps process-wide state (signal handlers, flag, metric and feature-gate
// registries). The blank imports of the official mains are in apiserver.go.

func runControllerManagerChild(args []string) int {
	watchParentPipe()
	cmd := controllermanager.NewControllerManagerCommand()
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

func runSchedulerChild(args []string) int {
	watchParentPipe()
	cmd := scheduler.NewSchedulerCommand()
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

func runKubeletChild(args []string) int {
	watchParentPipe()
	cmd := kubelet.NewKubeletCommand(context.Background())
	cmd.SetArgs(args)
	return cli.Run(cmd)
}
