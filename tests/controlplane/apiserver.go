package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	_ "time/tzdata" // for timeZone support in CronJob, as in cmd/kube-apiserver

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in cmd/kube-apiserver
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in cmd/kube-apiserver
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// runAPIServerChild is the `apiserver` subcommand: exactly the official
// kube-apiserver command (cmd/kube-apiserver/app) with the given flags. It runs
// in a child process because the kube-apiserver keeps process-wide state (the
// one-shot signal handler, metric and feature-gate registries), so it cannot
// be stopped and started again inside one process.
func runAPIServerChild(args []string) int {
	watchParentPipe()
	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

// apiServer supervises the `apiserver` child process and knows how to ask it
// whether it is ready.
type apiServer struct {
	child
	server string // https://127.0.0.1:PORT
	client *http.Client
	token  string
}

func newAPIServer(args []string, logPath, server string, caPEM []byte, token string) (*apiServer, error) {
	client, err := apiClient(caPEM)
	if err != nil {
		return nil, err
	}
	return &apiServer{
		child:  child{name: "kube-apiserver", args: append([]string{"apiserver"}, args...), logPath: logPath},
		server: server, client: client, token: token,
	}, nil
}

// apiClient is a short-timeout HTTPS client that trusts the harness's CA.
func apiClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("cannot parse the CA certificate")
	}
	return &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}, nil
}

// get performs an authenticated GET and returns the status and body.
func (a *apiServer) get(path string) (int, []byte, error) {
	return a.do(http.MethodGet, path, "", nil)
}

// do performs an authenticated request as the admin user.
func (a *apiServer) do(method, path, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, a.server+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, out, err
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
		status, body, err := a.get("/readyz")
		if err == nil {
			if status == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", status, failedChecks(body))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready after %s (last /readyz: %s)\n%s", timeout, last, a.logTail(60))
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
