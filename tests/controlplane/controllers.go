package main

import (
	"path/filepath"
	"strconv"
)

// startControllers runs kube-controller-manager beside an API server that
// has no node (--controllers): only the controllers listed, for tests that
// compare with what they do (the garbage collector, for the conformance
// suite) without the cost of a whole node.
func startControllers(env nodeEnv, controllers string) (*child, error) {
	kc := filepath.Join(env.dir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kc, env.server, env.caPEM, "system:kube-controller-manager", env.p.controllerManagerToken); err != nil {
		return nil, err
	}
	c := controllerManager(env, kc, "--controllers="+controllers)
	return c, c.start()
}

// controllerManager is the kube-controller-manager child (not started) with
// the flags every mode uses, then extra.
func controllerManager(env nodeEnv, kubeconfig string, extra ...string) *child {
	args := []string{
		"controller-manager",
		"--kubeconfig=" + kubeconfig,
		"--secure-port=0",
		"--leader-elect=false",
		// Each controller as its own ServiceAccount, with the roles the
		// bootstrap policy gives it (system:controller:...), as on a cluster.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + env.p.saKey,
		"--root-ca-file=" + env.p.caCert,
		"--cluster-name=kubewasm",
		"--allocate-node-cidrs=false",
		"--profiling=false",
		"--v=" + strconv.Itoa(env.verbosity),
	}
	return &child{name: "kube-controller-manager", logPath: filepath.Join(env.dir, "controller-manager.log"), args: append(args, extra...)}
}

// childDone is c's exit, or nothing when c is not running.
func childDone(c *child) <-chan error {
	if c == nil {
		return nil
	}
	return c.done()
}
