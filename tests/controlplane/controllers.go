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
	c := &child{name: "kube-controller-manager", logPath: filepath.Join(env.dir, "controller-manager.log"), args: []string{
		"controller-manager",
		"--kubeconfig=" + kc,
		"--controllers=" + controllers,
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
	}}
	return c, c.start()
}

// childDone is c's exit, or nothing when c is not running.
func childDone(c *child) <-chan error {
	if c == nil {
		return nil
	}
	return c.done()
}
