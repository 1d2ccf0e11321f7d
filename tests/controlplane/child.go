package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// parentPipeEnv tells a child component that its stdin is a pipe from the
// supervising parent: EOF means the parent is gone and the child must stop.
const parentPipeEnv = "KUBEWASM_CONTROLPLANE_PARENT_PIPE"

// watchParentPipe makes a child component shut down like on SIGTERM (its
// graceful path) when the supervising parent goes away.
func watchParentPipe() {
	if os.Getenv(parentPipeEnv) == "1" {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}()
	}
}

// child supervises one process at a time: either this binary re-executed
// with a subcommand (a Kubernetes component) or an external program
// (containerd). Its stdout and stderr are appended to logPath.
type child struct {
	name    string   // for logs: kube-apiserver, kubelet, containerd...
	path    string   // program; "" means this binary
	args    []string // arguments (for this binary: subcommand first)
	logPath string
	env     []string // extra environment

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error    // receives the child's exit once
	gone   chan struct{} // closed when the child exits
}

// start launches the child; its stdout and stderr go to the log file.
func (c *child) start() error {
	prog := c.path
	if prog == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		prog = self
	}
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n===== kubewasm-controlplane: starting %s %s =====\n", c.name, time.Now().Format(time.RFC3339Nano))

	cmd := exec.Command(prog, c.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(append(os.Environ(), parentPipeEnv+"=1"), c.env...)
	// Belt and braces next to the stdin pipe: if this process dies, so does the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", c.name, err)
	}
	c.cmd, c.stdin = cmd, stdin
	c.exited = make(chan error, 1)
	c.gone = make(chan struct{})
	go func(exited chan<- error, gone chan struct{}) {
		err := cmd.Wait()
		exited <- err
		close(gone)
	}(c.exited, c.gone)
	logf("%s started (pid %d), log %s", c.name, cmd.Process.Pid, c.logPath)
	return nil
}

// running reports whether the child has been started and not yet exited.
func (c *child) running() bool {
	if c.cmd == nil {
		return false
	}
	select {
	case err := <-c.exited:
		c.exited <- err
		return false
	default:
		return true
	}
}

// stop sends SIGTERM (the component's graceful shutdown), then SIGKILL after grace.
func (c *child) stop(grace time.Duration) error {
	if c.cmd == nil {
		return nil
	}
	defer func() { c.cmd = nil }()
	select {
	case err := <-c.exited:
		return err
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.exited:
		_ = c.stdin.Close()
		return exitErr(err)
	case <-time.After(grace):
		logf("%s did not stop within %s: killing it", c.name, grace)
		_ = c.cmd.Process.Kill()
		err := <-c.exited
		_ = c.stdin.Close()
		return exitErr(err)
	}
}

// stopAndLog stops the child and logs the outcome.
func (c *child) stopAndLog(grace time.Duration) {
	if c.cmd == nil {
		return
	}
	if err := c.stop(grace); err != nil {
		logf("%s exit: %v", c.name, err)
	} else {
		logf("%s stopped", c.name)
	}
}

// exitErr treats a component's own graceful exit codes as success.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() && ee.ExitCode() == 0 {
		return nil
	}
	if errors.As(err, &ee) && !ee.Exited() {
		// Killed by the SIGTERM we sent: containerd and the kubelet exit that way.
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return err
}

func (c *child) logTail(lines int) string {
	return fileTail(c.logPath, lines)
}

func fileTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "--- last lines of " + path + " ---\n" + strings.Join(all, "\n")
}

// done receives the child's exit status.
func (c *child) done() <-chan error { return c.exited }
