package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	_ "time/tzdata" // for timeZone support in CronJob, as in cmd/kube-apiserver

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in cmd/kube-apiserver
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// parentPipeEnv tells an `apiserver` child that its stdin is a pipe from the
// supervising parent: EOF means the parent is gone and the child must stop.
const parentPipeEnv = "KUBEWASM_CONTROLPLANE_PARENT_PIPE"

// runAPIServerChild is the `apiserver` subcommand: exactly the official
// kube-apiserver command (cmd/kube-apiserver/app) with the given flags. It runs
// in a child process because the kube-apiserver keeps process-wide state (the
// one-shot signal handler, metric and feature-gate registries), so it cannot
// be stopped and started again inside one process.
func runAPIServerChild(args []string) int {
	if os.Getenv(parentPipeEnv) == "1" {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			// The parent is gone: shut down like on SIGTERM (graceful path).
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}()
	}
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

// apiServer supervises one `apiserver` child process at a time.
type apiServer struct {
	args    []string // kube-apiserver flags
	logPath string
	server  string // https://127.0.0.1:PORT
	client  *http.Client
	token   string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error // receives the child's exit once
}

func newAPIServer(args []string, logPath, server string, caPEM []byte, token string) (*apiServer, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("cannot parse the CA certificate")
	}
	client := &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
	return &apiServer{args: args, logPath: logPath, server: server, client: client, token: token}, nil
}

// start launches the child; its stdout and stderr go to the log file.
func (a *apiServer) start() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "\n===== kubewasm-controlplane: starting kube-apiserver %s =====\n", time.Now().Format(time.RFC3339Nano))

	cmd := exec.Command(self, append([]string{"apiserver"}, a.args...)...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), parentPipeEnv+"=1")
	// Belt and braces next to the stdin pipe: if this process dies, so does the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	a.cmd, a.stdin = cmd, stdin
	a.exited = make(chan error, 1)
	go func(exited chan<- error) { exited <- cmd.Wait() }(a.exited)
	logf("kube-apiserver started (pid %d), log %s", cmd.Process.Pid, a.logPath)
	return nil
}

// errStopping (from main.go) is returned when stopping closes first.
// waitReady polls /readyz until it answers 200, the child exits, stopping is
// closed or the timeout passes.
func (a *apiServer) waitReady(timeout time.Duration, stopping <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		select {
		case err := <-a.exited:
			a.exited <- err // keep it for whoever waits next
			return fmt.Errorf("kube-apiserver exited before it was ready (%v)\n%s", err, a.logTail(60))
		case <-stopping:
			return errStopping
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, a.server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+a.token)
		resp, err := a.client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, failedChecks(body))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after %s (last /readyz: %s)\n%s", timeout, last, a.logTail(60))
}

// stop sends SIGTERM (the apiserver's graceful shutdown), then SIGKILL after grace.
func (a *apiServer) stop(grace time.Duration) error {
	if a.cmd == nil {
		return nil
	}
	defer func() { a.cmd = nil }()
	select {
	case err := <-a.exited:
		return err
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.exited:
		_ = a.stdin.Close()
		return exitErr(err)
	case <-time.After(grace):
		logf("kube-apiserver did not stop within %s: killing it", grace)
		_ = a.cmd.Process.Kill()
		err := <-a.exited
		_ = a.stdin.Close()
		return exitErr(err)
	}
}

// exitErr treats the apiserver's own graceful exit codes as success.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() && ee.ExitCode() == 0 {
		return nil
	}
	return err
}

func (a *apiServer) logTail(lines int) string {
	data, err := os.ReadFile(a.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "--- last lines of " + a.logPath + " ---\n" + strings.Join(all, "\n")
}

// failedChecks keeps the failing lines of a verbose /readyz answer.
func failedChecks(body []byte) string {
	var out []string
	for _, l := range bytes.Split(body, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("[-]")) {
			out = append(out, string(l))
		}
	}
	if len(out) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(out, "; ")
}

// done receives the child's exit status.
func (a *apiServer) done() <-chan error { return a.exited }
