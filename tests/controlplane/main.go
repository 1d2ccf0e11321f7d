// Command kubewasm-controlplane runs a real Kubernetes control plane for the
// kubewasm end-to-end tests: the official kube-apiserver (k8s.io/kubernetes,
// cmd/kube-apiserver/app) backed by an embedded etcd (go.etcd.io/etcd/server/v3/embed),
// both on 127.0.0.1 with free ports, all state in --dir.
//
// Protocol (for the test harness):
//   - stdout carries exactly one line when the API server first answers /readyz:
//     KUBEWASM-CONTROLPLANE READY {"server":...,"adminKubeconfig":...,"userKubeconfig":...,"etcd":...}
//     and one line `KUBEWASM-CONTROLPLANE RESTARTED` after each SIGHUP restart.
//     Everything else goes to stderr; the apiserver logs to --dir/apiserver.log,
//     etcd to --dir/etcd.log.
//   - SIGHUP: stop the API server (etcd keeps running) and start it again on the
//     same port with the same data.
//   - SIGTERM / SIGINT (and stdin EOF with --exit-on-stdin-eof): stop everything, exit 0.
//
// The API server runs as a child process of this binary (`kubewasm-controlplane
// apiserver FLAGS...`) while etcd stays in this process: the kube-apiserver
// keeps process-wide state that rules out an in-process restart.
package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
	readyPrefix = "KUBEWASM-CONTROLPLANE READY "
	restartLine = "KUBEWASM-CONTROLPLANE RESTARTED"
)

type options struct {
	dir                string
	compactionInterval time.Duration
	etcdQuota          int64
	watchCache         bool
	exitOnStdinEOF     bool
	removeDir          bool
	verbosity          int
	port               int
	readyTimeout       time.Duration
	stopGrace          time.Duration
	extra              []string
	node               bool
	nodeTimeout        time.Duration
	controllers        string
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "apiserver":
			os.Exit(runAPIServerChild(os.Args[2:]))
		case "controller-manager":
			os.Exit(runControllerManagerChild(os.Args[2:]))
		case "scheduler":
			os.Exit(runSchedulerChild(os.Args[2:]))
		case "kubelet":
			os.Exit(runKubeletChild(os.Args[2:]))
		case "image":
			os.Exit(runImage(os.Args[2:]))
		case "apply":
			os.Exit(runApply(os.Args[2:]))
		case "get":
			os.Exit(runGet(os.Args[2:]))
		case "kubectl-get":
			os.Exit(runKubectlGet(os.Args[2:]))
		}
	}
	os.Exit(run())
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kubewasm-controlplane: "+format+"\n", args...)
}

func parseFlags() options {
	var o options
	fs := flag.NewFlagSet("kubewasm-controlplane", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kubewasm-controlplane --dir DIR [flags]\n"+
			"       kubewasm-controlplane apiserver KUBE-APISERVER-FLAGS...\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dir, "dir", "", "directory for all state: etcd data, certificates, tokens, kubeconfigs, logs (required)")
	fs.DurationVar(&o.compactionInterval, "etcd-compaction-interval", 5*time.Minute,
		"the apiserver's --etcd-compaction-interval; short values (2s) make old resourceVersions expire (410 Gone)")
	fs.Int64Var(&o.etcdQuota, "etcd-quota-bytes", 0,
		"etcd's backend quota in bytes (0: etcd's default, 2 GiB); scripts/bench.sh's 100k Pods need more")
	fs.BoolVar(&o.watchCache, "watch-cache", true,
		"the apiserver's --watch-cache; with the cache on, 410 Gone comes from the cache's window, with it off from etcd compaction")
	fs.BoolVar(&o.exitOnStdinEOF, "exit-on-stdin-eof", false, "shut down when stdin reaches EOF (the parent process went away)")
	fs.BoolVar(&o.removeDir, "remove-dir", false, "remove --dir after shutting down")
	fs.IntVar(&o.verbosity, "v", 0, "kube-apiserver log verbosity (its -v)")
	fs.IntVar(&o.port, "port", 0, "kube-apiserver secure port (0: pick a free one)")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 120*time.Second, "how long to wait for /readyz")
	fs.DurationVar(&o.stopGrace, "stop-grace", 30*time.Second, "how long the apiserver may take to stop before it is killed")
	fs.BoolVar(&o.node, "node", false,
		"a whole single-node cluster: also kube-controller-manager, kube-scheduler, containerd and a kubelet (root only)")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", 180*time.Second, "how long to wait for the node to report Ready (--node)")
	fs.StringVar(&o.controllers, "controllers", "",
		"without --node: also run kube-controller-manager with only these controllers (its --controllers, e.g. garbagecollector)")
	fs.Func("apiserver-arg", "extra kube-apiserver flag, repeatable (e.g. --apiserver-arg=--runtime-config=api/all=true)",
		func(s string) error { o.extra = append(o.extra, s); return nil })
	_ = fs.Parse(os.Args[1:])
	if o.dir == "" || fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	return o
}

func run() int {
	o := parseFlags()

	// Signals and stdin EOF are watched from the start so that a stop request
	// during startup still shuts down cleanly.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	// The harness that reads stderr may be gone already (that is what stdin
	// EOF means): a log write must then fail, not kill us with SIGPIPE before
	// the cleanup ran.
	signal.Ignore(syscall.SIGPIPE)
	hup := make(chan struct{}, 1)
	stopping := make(chan struct{})
	var stopOnce sync.Once
	stop := func(why string) {
		stopOnce.Do(func() { logf("stopping: %s", why); close(stopping) })
	}
	go func() {
		for s := range sigs {
			if s == syscall.SIGHUP {
				select {
				case hup <- struct{}{}:
				default: // a restart is already pending
				}
			} else {
				stop(s.String())
			}
		}
	}()
	if o.exitOnStdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop("stdin closed")
		}()
	}

	code := serve(o, hup, stopping)
	if o.removeDir {
		if err := os.RemoveAll(o.dir); err != nil {
			logf("removing %s: %v", o.dir, err)
		}
	}
	return code
}

var errStopping = errors.New("stopping")

func serve(o options, hup <-chan struct{}, stopping <-chan struct{}) int {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		logf("%v", err)
		return 1
	}
	started := time.Now()

	p, err := ensurePKI(dir)
	if err != nil {
		logf("%v", err)
		return 1
	}
	caPEM, err := os.ReadFile(p.caCert)
	if err != nil {
		logf("%v", err)
		return 1
	}

	ports, err := freePorts(3)
	if err != nil {
		logf("picking free ports: %v", err)
		return 1
	}
	if o.port != 0 {
		ports[2] = o.port
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	server := fmt.Sprintf("https://127.0.0.1:%d", ports[2])

	etcd, err := startEtcd(dir, etcdURL, peerURL, o.etcdQuota, stopping)
	if err != nil {
		logf("etcd: %v", err)
		if errors.Is(err, errStopping) {
			return 0
		}
		return 1
	}
	defer func() {
		etcd.Close()
		logf("etcd stopped")
	}()
	logf("etcd ready at %s (data %s)", etcdURL, filepath.Join(dir, "etcd"))

	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	userKubeconfig := filepath.Join(dir, "user.kubeconfig")
	if err := writeKubeconfig(adminKubeconfig, server, caPEM, "admin", p.adminToken); err != nil {
		logf("%v", err)
		return 1
	}
	if err := writeKubeconfig(userKubeconfig, server, caPEM, e2eUser, p.userToken); err != nil {
		logf("%v", err)
		return 1
	}

	authz := "RBAC"
	if o.node {
		authz = "Node,RBAC"
	}
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + p.serverCert,
		"--tls-private-key-file=" + p.serverKey,
		"--cert-dir=" + p.dir,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--token-auth-file=" + p.tokens,
		"--authorization-mode=" + authz,
		// Loopback only: no endpoints for the kubernetes Service.
		"--endpoint-reconciler-type=none",
		"--etcd-compaction-interval=" + o.compactionInterval.String(),
		"--watch-cache=" + strconv.FormatBool(o.watchCache),
		// Beta and on by default since 1.34; explicit so that watch-list
		// (sendInitialEvents=true) streaming initial lists keep working.
		"--feature-gates=WatchList=true",
		"--profiling=false",
		"--v=" + strconv.Itoa(o.verbosity),
	}
	if o.node {
		args = append(args,
			"--enable-admission-plugins=NodeRestriction",
			"--client-ca-file="+p.caCert,
			"--kubelet-client-certificate="+p.kubeletClientCert,
			"--kubelet-client-key="+p.kubeletClientKey,
			"--kubelet-preferred-address-types=InternalIP,Hostname",
		)
	} else {
		// No controller-manager runs: nothing would create the default
		// ServiceAccount that this admission plugin insists on for Pods.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	args = append(args, o.extra...)

	api, err := newAPIServer(args, filepath.Join(dir, "apiserver.log"), server, caPEM, p.adminToken)
	if err != nil {
		logf("%v", err)
		return 1
	}
	startAndWait := func() error {
		if err := api.start(); err != nil {
			return err
		}
		return api.waitReady(o.readyTimeout, stopping)
	}
	stopAPI := func() {
		if err := api.stop(o.stopGrace); err != nil {
			logf("kube-apiserver exit: %v", err)
		} else {
			logf("kube-apiserver stopped")
		}
	}

	if err := startAndWait(); err != nil {
		stopAPI()
		if errors.Is(err, errStopping) {
			return 0
		}
		logf("%v", err)
		return 1
	}
	var n *node
	if o.node {
		logf("kube-apiserver ready in %s; starting the node", time.Since(started).Round(time.Millisecond))
		n, err = startNode(nodeEnv{dir: dir, server: server, p: p, caPEM: caPEM, verbosity: o.verbosity}, api, o.nodeTimeout, stopping)
		if err != nil {
			n.stop(o.stopGrace)
			stopAPI()
			if errors.Is(err, errStopping) {
				return 0
			}
			logf("node: %v", err)
			return 1
		}
		logf("node %s Ready", nodeName)
	}
	var cm *child
	if !o.node && o.controllers != "" {
		cm, err = startControllers(nodeEnv{dir: dir, server: server, p: p, caPEM: caPEM, verbosity: o.verbosity}, o.controllers)
		if err != nil {
			if cm != nil {
				cm.stopAndLog(o.stopGrace)
			}
			stopAPI()
			logf("controllers: %v", err)
			return 1
		}
		logf("kube-controller-manager started with controllers %s", o.controllers)
	}
	stopAll := func() {
		if n != nil {
			n.stop(o.stopGrace)
		}
		if cm != nil {
			cm.stopAndLog(o.stopGrace)
		}
		stopAPI()
	}
	type nodeInfo struct {
		Name             string `json:"name"`
		ContainerdSocket string `json:"containerdSocket"`
	}
	var ni *nodeInfo
	if n != nil {
		ni = &nodeInfo{Name: nodeName, ContainerdSocket: n.socket}
	}
	ready, _ := json.Marshal(struct {
		Server          string    `json:"server"`
		AdminKubeconfig string    `json:"adminKubeconfig"`
		UserKubeconfig  string    `json:"userKubeconfig"`
		Etcd            string    `json:"etcd"`
		Node            *nodeInfo `json:"node,omitempty"`
	}{server, adminKubeconfig, userKubeconfig, etcdURL, ni})
	logf("ready in %s", time.Since(started).Round(time.Millisecond))
	fmt.Fprintln(os.Stdout, readyPrefix+string(ready))

	for {
		select {
		case <-stopping:
			stopAll()
			return 0
		case err := <-nodeDone(n):
			logf("a node component exited unexpectedly (%v)", err)
			stopAll()
			return 1
		case err := <-childDone(cm):
			logf("kube-controller-manager exited unexpectedly (%v)\n%s", err, cm.logTail(60))
			stopAll()
			return 1
		case err := <-api.done():
			logf("kube-apiserver exited unexpectedly (%v)\n%s", err, api.logTail(60))
			stopAll()
			return 1
		case <-hup:
			logf("SIGHUP: restarting kube-apiserver on %s", server)
			t := time.Now()
			stopAPI()
			if err := startAndWait(); err != nil {
				stopAll()
				if errors.Is(err, errStopping) {
					return 0
				}
				logf("restart failed: %v", err)
				return 1
			}
			logf("restarted in %s", time.Since(t).Round(time.Millisecond))
			fmt.Fprintln(os.Stdout, restartLine)
		}
	}
}

func startEtcd(dir, clientURL, peerURL string, quota int64, stopping <-chan struct{}) (*embed.Etcd, error) {
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "kubewasm"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	// A throwaway test store: skipping fsync makes writes much cheaper.
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = quota

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-stopping:
		e.Close()
		return nil, errStopping
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("not ready after 60s (see etcd.log)")
	}
}

// freePorts holds n ephemeral loopback listeners at once (so the ports differ)
// and returns their ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: kubewasm
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kubewasm
  context:
    cluster: kubewasm
    user: %s
    namespace: default
current-context: kubewasm
`, server, base64.StdEncoding.EncodeToString(caPEM), user, token, user)
	return writeFileAtomic(path, []byte(b.String()), 0o600)
}
