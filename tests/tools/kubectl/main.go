// kubectl for the tests, on machines without one: kubectl's own command
// tree (k8s.io/kubectl), wired as k8s.io/kubernetes/cmd/kubectl wires it,
// at the test cluster's version (go.mod). No cloud auth plugins: the tests'
// kubeconfigs carry client certificates or tokens.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
