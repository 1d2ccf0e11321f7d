package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The node mode (--node): kube-controller-manager, kube-scheduler, containerd
// and a kubelet next to the API server and etcd, all state under DIR/node.
//
// Choices, and why:
//   - containerd is Debian's, started here with its own config, root, state
//     and socket under the run directory (nothing system-wide, no systemd).
//   - The sandbox (pause) image is built from a static program next to this
//     binary and imported before the kubelet starts: no registry is reachable.
//   - CNI is configured only as far as the node needs to report Ready: one
//     loopback network. Test Pods use hostNetwork, and in-cluster clients
//     reach the API server at 127.0.0.1 (KUBERNETES_SERVICE_HOST/PORT set in
//     the Pod spec), so neither Pod networking nor kube-proxy is needed.
//   - Components authenticate with static tokens (the API server's
//     --token-auth-file) as the users kubeadm gives them: system:kube-*, and
//     system:node:NAME in system:nodes for the kubelet (Node authorizer and
//     NodeRestriction on). The API server reaches the kubelet with a client
//     certificate from the harness's CA.
//   - The kubelet runs on cgroup v1 (failCgroupV1: false; v1.35 is the last
//     minor that allows it) with the cgroupfs driver under the cgroup root
//     /kubewasm, so everything it creates is in one subtree.

const (
	nodeName   = "kubewasm-node"
	pauseImage = "kubewasm.local/pause:1"
	cgroupRoot = "/kubewasm"
)

type node struct {
	dir        string // DIR/node
	socket     string // containerd's CRI socket
	containerd *child
	kubelet    *child
	cm         *child
	sched      *child
	stopping   atomic.Bool
	failed     chan error // a component exited while the node was up
}

type nodeEnv struct {
	dir       string // the run directory (--dir)
	server    string // https://127.0.0.1:PORT
	p         *pki
	caPEM     []byte
	verbosity int
}

// startNode brings up the rest of the cluster once the API server is ready
// and waits until the Node reports Ready. On error the caller calls stop.
func startNode(env nodeEnv, api *apiServer, timeout time.Duration, stopping <-chan struct{}) (*node, error) {
	n := &node{dir: filepath.Join(env.dir, "node")}
	for _, d := range []string{"containerd", "cni/net.d", "kubelet", "pod-logs", "images"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return n, err
		}
	}
	kc := func(name, user, token string) (string, error) {
		p := filepath.Join(n.dir, name+".kubeconfig")
		return p, writeKubeconfig(p, env.server, env.caPEM, user, token)
	}
	cmKC, err := kc("controller-manager", "system:kube-controller-manager", env.p.controllerManagerToken)
	if err != nil {
		return n, err
	}
	schedKC, err := kc("scheduler", "system:kube-scheduler", env.p.schedulerToken)
	if err != nil {
		return n, err
	}
	kubeletKC, err := kc("kubelet", "system:node:"+nodeName, env.p.nodeToken)
	if err != nil {
		return n, err
	}
	v := "--v=" + strconv.Itoa(env.verbosity)

	n.cm = controllerManager(env, cmKC)
	if err := n.cm.start(); err != nil {
		return n, err
	}
	n.sched = &child{name: "kube-scheduler", logPath: filepath.Join(env.dir, "scheduler.log"), args: []string{
		"scheduler",
		"--kubeconfig=" + schedKC,
		"--secure-port=0",
		"--leader-elect=false",
		"--profiling=false",
		v,
	}}
	if err := n.sched.start(); err != nil {
		return n, err
	}

	if err := n.startContainerd(env, stopping); err != nil {
		return n, err
	}
	if err := n.importPause(); err != nil {
		return n, err
	}
	if err := n.startKubelet(env, kubeletKC, v); err != nil {
		return n, err
	}
	if err := n.waitReady(api, timeout, stopping); err != nil {
		return n, err
	}
	n.failed = make(chan error, 1)
	for _, c := range []*child{n.cm, n.sched, n.containerd, n.kubelet} {
		go func(c *child) {
			<-c.gone
			if !n.stopping.Load() {
				select {
				case n.failed <- fmt.Errorf("%s exited\n%s", c.name, c.logTail(40)):
				default:
				}
			}
		}(c)
	}
	return n, nil
}

// nodeDone reports a node component that exited on its own (nil: never).
func nodeDone(n *node) <-chan error {
	if n == nil {
		return nil
	}
	return n.failed
}

func (n *node) startContainerd(env nodeEnv, stopping <-chan struct{}) error {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return errors.New("containerd is not installed (Debian: apt-get install containerd runc containernetworking-plugins; scripts/setup.sh does it)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return errors.New("runc is not installed (apt-get install runc)")
	}
	cniBin := "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(cniBin, "loopback")); err != nil {
		return errors.New("the CNI plugins are not installed in /usr/lib/cni (apt-get install containernetworking-plugins)")
	}
	cd := filepath.Join(n.dir, "containerd")
	n.socket = filepath.Join(cd, "containerd.sock")
	cni := `{"cniVersion": "0.4.0", "name": "kubewasm-loopback", "plugins": [{"type": "loopback"}]}` + "\n"
	if err := writeFileAtomic(filepath.Join(n.dir, "cni/net.d/10-kubewasm.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	runc, _ := exec.LookPath("runc")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # No CAP_SYS_RESOURCE on this kind of machine: a negative oom_score_adj
  # (the kubelet asks -998 for every sandbox) fails in runc's init with
  # "can't get final child's PID from pipe: EOF". Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), n.socket, n.socket+".ttrpc",
		filepath.Join(cd, "opt"), pauseImage, runc, cniBin, filepath.Join(n.dir, "cni/net.d"))
	configPath := filepath.Join(cd, "config.toml")
	if err := writeFileAtomic(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	n.containerd = &child{name: "containerd", path: bin, logPath: filepath.Join(env.dir, "containerd.log"),
		args: []string{"--config", configPath}}
	if err := n.containerd.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-n.containerd.done():
			n.containerd.exited <- err
			return fmt.Errorf("containerd exited (%v)\n%s", err, n.containerd.logTail(40))
		case <-stopping:
			return errStopping
		default:
		}
		if out, err := n.ctr("version"); err == nil && strings.Contains(out, "Server:") {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("containerd did not answer on %s within 30s\n%s", n.socket, n.containerd.logTail(40))
}

// ctr runs Debian's ctr against this node's containerd in the CRI namespace.
func (n *node) ctr(args ...string) (string, error) {
	cmd := exec.Command("ctr", append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// importPause builds the sandbox image from the static pause program next to
// this binary (built by build.sh) and imports it.
func (n *node) importPause() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pause := filepath.Join(filepath.Dir(self), "pause")
	if _, err := os.Stat(pause); err != nil {
		return fmt.Errorf("the sandbox program %s is missing (tests/controlplane/build.sh builds it)", pause)
	}
	archive := filepath.Join(n.dir, "images", "pause.tar")
	spec := imageSpec{name: pauseImage, files: []imageFile{{src: pause, dst: "/pause", mode: 0o755}}, entrypoint: []string{"/pause"}, user: "65535:65535"}
	if err := writeImageArchive(archive, spec); err != nil {
		return fmt.Errorf("building %s: %w", spec.describe(), err)
	}
	// --all-platforms: the archive names no platform list to match against.
	if _, err := n.ctr("images", "import", "--all-platforms", archive); err != nil {
		return err
	}
	// The kubelet's image garbage collector must never remove the sandbox.
	if _, err := n.ctr("images", "label", pauseImage, "io.cri-containerd.pinned=pinned"); err != nil {
		logf("pinning %s: %v", pauseImage, err)
	}
	return nil
}

func (n *node) startKubelet(env nodeEnv, kubeconfig, v string) error {
	// The kubelet wants its cgroup root to exist in every hierarchy.
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if err := os.Mkdir(filepath.Join(h, cgroupRoot), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating the cgroup root: %w", err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kd := filepath.Join(n.dir, "kubelet")
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 here: kubelet v1.35 refuses it unless told (KEP-5573).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
staticPodPath: ""
address: 127.0.0.1
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[5]q}
authorization: {mode: Webhook}
podLogsDir: %[6]q
resolvConf: /etc/resolv.conf
# Locally imported images cannot be pulled again: never collect them, and
# never evict for a disk the test machine shares with its builds.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
# ConfigMap volume updates and Pod status reach the API server promptly.
syncFrequency: 5s
nodeStatusUpdateFrequency: 5s
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
protectKernelDefaults: false
`, cgroupRoot, n.socket, ports[0], ports[1], env.p.caCert, filepath.Join(n.dir, "pod-logs"))
	configPath := filepath.Join(kd, "config.yaml")
	if err := writeFileAtomic(configPath, []byte(config), 0o644); err != nil {
		return err
	}
	n.kubelet = &child{name: "kubelet", logPath: filepath.Join(env.dir, "kubelet.log"), args: []string{
		"kubelet",
		"--config=" + configPath,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + kd,
		"--cert-dir=" + filepath.Join(kd, "pki"),
		"--hostname-override=" + nodeName,
		"--node-ip=127.0.0.1",
		v,
	}}
	return n.kubelet.start()
}

// nodeAddresses is what the harness records as the Node's addresses. The
// kubelet refuses a loopback --node-ip ("nodeIP can't be loopback address")
// and would otherwise pick the machine's own non-loopback address; given
// 127.0.0.1 it fails its address check and then leaves the addresses alone,
// so the harness sets them once through the status subresource. The API
// server then reaches the kubelet (logs, exec) on 127.0.0.1, and hostNetwork
// Pods get 127.0.0.1 as their IP (probes go there too).
const nodeAddresses = `{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":"` + nodeName + `"}]}}`

// waitReady polls the Node object until its Ready condition is True and its
// addresses are recorded.
func (n *node) waitReady(api *apiServer, timeout time.Duration, stopping <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	last := "not registered yet"
	for time.Now().Before(deadline) {
		for _, c := range []*child{n.kubelet, n.containerd, n.cm, n.sched} {
			select {
			case err := <-c.done():
				c.exited <- err
				return fmt.Errorf("%s exited before the node was Ready (%v)\n%s", c.name, err, c.logTail(60))
			default:
			}
		}
		select {
		case <-stopping:
			return errStopping
		default:
		}
		status, body, err := api.get("/api/v1/nodes/" + nodeName)
		switch {
		case err != nil:
			last = err.Error()
		case status != http.StatusOK:
			last = fmt.Sprintf("HTTP %d", status)
		default:
			ready, hasAddress, why := nodeReady(body)
			if !hasAddress {
				status, body, err := api.do(http.MethodPatch, "/api/v1/nodes/"+nodeName+"/status",
					"application/merge-patch+json", []byte(nodeAddresses))
				if err != nil || status != http.StatusOK {
					last = fmt.Sprintf("recording the node's addresses: HTTP %d %v %s", status, err, body)
				}
				break
			}
			if !ready {
				last = why
				break
			}
			// The ServiceAccount controller is up once the default
			// namespace has its ServiceAccount: Pods are refused before.
			status, _, err := api.get("/api/v1/namespaces/default/serviceaccounts/default")
			if err == nil && status == http.StatusOK {
				return nil
			}
			last = "node Ready; waiting for the default ServiceAccount (kube-controller-manager)"
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready after %s (last: %s)\n%s", nodeName, timeout, last, n.kubelet.logTail(60))
}

// nodeReady reads a Node: whether it is Ready, whether its InternalIP is
// recorded, and why not.
func nodeReady(body []byte) (ready, hasAddress bool, why string) {
	var obj struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
			}
			Addresses []struct {
				Type, Address string
			}
		}
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return false, false, err.Error()
	}
	for _, a := range obj.Status.Addresses {
		if a.Type == "InternalIP" && a.Address == "127.0.0.1" {
			hasAddress = true
		}
	}
	for _, c := range obj.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True", hasAddress, c.Reason + ": " + c.Message
		}
	}
	return false, hasAddress, "no Ready condition yet"
}

// stop shuts the node down: the kubelet first (so it restarts nothing), then
// every container still running (the kubelet leaves them), containerd, and
// the controllers. Mounts left under the run directory (projected volumes,
// container root filesystems) are unmounted and empty cgroups removed, so
// the machine is left as it was.
func (n *node) stop(grace time.Duration) {
	n.stopping.Store(true)
	if n.kubelet != nil {
		n.kubelet.stopAndLog(grace)
	}
	if n.containerd != nil && n.containerd.running() {
		n.removeContainers()
		n.containerd.stopAndLog(grace)
	}
	if n.socket != "" {
		killShims(n.socket)
	}
	for _, c := range []*child{n.sched, n.cm} {
		if c != nil {
			c.stopAndLog(grace)
		}
	}
	unmountUnder(n.dir)
	removeCgroups(cgroupRoot)
}

// removeContainers kills and deletes every task and container of the CRI
// namespace.
func (n *node) removeContainers() {
	out, err := n.ctr("tasks", "ls", "-q")
	if err != nil {
		logf("listing containers: %v", err)
	}
	ids := strings.Fields(out)
	for _, id := range ids {
		_, _ = n.ctr("tasks", "kill", "-s", "SIGKILL", id)
	}
	for _, id := range ids {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := n.ctr("tasks", "delete", id); err == nil || strings.Contains(err.Error(), "not found") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	out, _ = n.ctr("containers", "ls", "-q")
	for _, id := range strings.Fields(out) {
		_, _ = n.ctr("containers", "delete", id)
	}
	if len(ids) > 0 {
		logf("removed %d containers", len(ids))
	}
}

// killShims ends the runtime shims of this containerd that outlived it (a
// shim whose sandbox was being torn down when containerd stopped).
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) == 0 || !strings.Contains(args[0], "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					logf("killed a leftover shim (pid %d)", pid)
				}
				break
			}
		}
	}
}

// unmountUnder detaches every mount point below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, unescapeMount(f[4]))
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			logf("unmount %s: %v", p, err)
		}
	}
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes the (now empty) cgroup subtree the kubelet made in
// every v1 hierarchy, deepest first. Busy ones stay and are reported.
func removeCgroups(root string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		base := filepath.Join(h, root)
		var dirs []string
		_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				logf("cgroup %s stays: %v", dirs[i], err)
			}
		}
	}
}
