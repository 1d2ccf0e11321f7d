// Command pause is the pod sandbox's process for the test node: it holds the
// Pod's namespaces, reaps orphaned children (it is PID 1 when the Pod shares
// its process namespace) and exits on SIGINT or SIGTERM, like Kubernetes'
// own pause.c. It is built statically (CGO_ENABLED=0) and packed into the
// sandbox image by `kubewasm-controlplane image`, because no registry is
// reachable to pull registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("pause (kubewasm test node)\n")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
