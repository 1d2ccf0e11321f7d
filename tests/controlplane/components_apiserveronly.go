//go:build apiserveronly

package main

// A build of the API server alone (build tag apiserveronly): the newer
// Kubernetes release build.sh also builds, for the tests of features that
// release's API server adds. The node components and kubectl's get are not
// in it.

func runControllerManagerChild([]string) int { return notBuilt("controller-manager") }
func runSchedulerChild([]string) int         { return notBuilt("scheduler") }
func runKubeletChild([]string) int           { return notBuilt("kubelet") }
func runKubectlGet([]string) int             { return notBuilt("kubectl-get") }

func notBuilt(what string) int {
	logf("%s is not in this build (the API server alone, build tag apiserveronly): use kubewasm-controlplane", what)
	return 2
}
