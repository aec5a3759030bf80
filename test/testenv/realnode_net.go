package testenv

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// NodeNetwork is a real node's network: a network namespace the test made,
// joined to the host by a veth pair, with a CNI bridge for its pods.
//
// The kubelet refuses a loopback node IP, and the control plane listens on
// 127.0.0.1 only, so:
//   - the node's address is the namespace's end of the veth pair
//     (10.251.X.2; the host's end is 10.251.X.1), which kube-apiserver
//     reaches for logs and exec;
//   - the kubernetes Service address (10.96.0.1:443) is an address of the
//     namespace itself, where the harness listens and forwards each
//     connection to kube-apiserver on the host's loopback. TLS passes
//     through untouched; the serving certificate names 10.96.0.1. This
//     stands in for the one kube-proxy rule that matters here (there is no
//     kube-proxy), for the kubelet and for pods using in-cluster config;
//   - pods get 10.252.X.0/24 on the bridge cni0 inside the namespace.
//
// Every address lives in the namespace or on its veth; nothing listens
// beyond loopback and these.
type NodeNetwork struct {
	id      string
	netns   string
	hostIf  string
	hostIP  string
	nodeIP  string
	podCIDR string
	apiAddr string // host:port of the API inside the namespace

	mu       sync.Mutex
	listener net.Listener
	conns    map[net.Conn]struct{}
	closed   bool
}

// NewNodeNetwork makes a real node's network namespace, its veth pair, and
// the kubernetes Service address inside it, forwarding to the Env's
// kube-apiserver. Close removes all of it.
func (e *Env) NewNodeNetwork(id string) (*NodeNetwork, error) {
	n, err := newNodeNetwork(id)
	if err != nil {
		return nil, err
	}
	if err := n.proxyAPIServer(e.server); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return n, nil
}

func newNodeNetwork(id string) (*NodeNetwork, error) {
	var b [1]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	x := int(b[0])%250 + 2
	id = strings.ToLower(strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, id))
	if len(id) > 8 {
		id = id[:8]
	}
	n := &NodeNetwork{
		id:      id,
		netns:   "na-" + id,
		hostIf:  "nah" + id, // at most 11 of IFNAMSIZ's 15
		hostIP:  fmt.Sprintf("10.251.%d.1", x),
		nodeIP:  fmt.Sprintf("10.251.%d.2", x),
		podCIDR: fmt.Sprintf("10.252.%d.0/24", x),
		apiAddr: net.JoinHostPort(kubernetesServiceIP.String(), "443"),
		conns:   map[net.Conn]struct{}{},
	}
	steps := [][]string{
		{"netns", "add", n.netns},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"addr", "add", n.hostIP + "/24", "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		{"-n", n.netns, "addr", "add", n.nodeIP + "/24", "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "addr", "add", kubernetesServiceIP.String() + "/32", "dev", "lo"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, errors.Join(err, n.Close())
		}
	}
	return n, nil
}

func ip(args ...string) error {
	out, err := exec.Command("/usr/sbin/ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NSPath is the network namespace's path, for nsenter --net= and
// systemd-nspawn --network-namespace-path=.
func (n *NodeNetwork) NSPath() string { return "/run/netns/" + n.netns }

// NodeIP is the node's address in the namespace.
func (n *NodeNetwork) NodeIP() string { return n.nodeIP }

// APIServer is the URL of kube-apiserver as seen from the namespace.
func (n *NodeNetwork) APIServer() string { return "https://" + n.apiAddr }

// CNIConfig is the bridge network of the node's pods. host-local keeps its
// leases under ipamDir, not in the host's /var/lib/cni.
func (n *NodeNetwork) CNIConfig(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "node-agent-test",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, ipamDir, n.podCIDR)
}

// proxyAPIServer listens on the kubernetes Service address inside the
// namespace and forwards every connection to target (https://127.0.0.1:PORT)
// on the host.
func (n *NodeNetwork) proxyAPIServer(target string) error {
	hostPort := strings.TrimPrefix(target, "https://")
	l, err := listenInNetns(n.NSPath(), n.apiAddr)
	if err != nil {
		return fmt.Errorf("listening on %s in %s: %w", n.apiAddr, n.netns, err)
	}
	n.mu.Lock()
	n.listener = l
	n.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go n.forward(c, hostPort)
		}
	}()
	return nil
}

func (n *NodeNetwork) forward(c net.Conn, hostPort string) {
	up, err := net.Dial("tcp", hostPort)
	if err != nil {
		c.Close()
		return
	}
	if !n.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	n.untrack(c, up)
}

func (n *NodeNetwork) track(conns ...net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		n.conns[c] = struct{}{}
	}
	return true
}

func (n *NodeNetwork) untrack(conns ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(n.conns, c)
	}
}

// Close stops the proxy and deletes the namespace, which takes the veth
// pair and the bridge with it.
func (n *NodeNetwork) Close() error {
	n.mu.Lock()
	n.closed = true
	if n.listener != nil {
		n.listener.Close()
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	var errs []error
	if _, err := os.Stat(n.NSPath()); err == nil {
		errs = append(errs, ip("netns", "del", n.netns))
	}
	// Normally gone with its peer; left over only if the namespace was.
	if _, err := net.InterfaceByName(n.hostIf); err == nil {
		errs = append(errs, ip("link", "del", n.hostIf))
	}
	return errors.Join(errs...)
}

// listenInNetns opens a TCP listener inside the network namespace at nsPath.
// A socket belongs to the namespace it was made in, so only the thread that
// makes it switches namespaces, and switches back before any other goroutine
// can run on it.
func listenInNetns(nsPath, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		l, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with this goroutine, so
			// no other goroutine ever runs in the wrong namespace.
			if l != nil {
				l.Close()
			}
			ch <- result{err: fmt.Errorf("returning to the host network namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{l: l, err: lerr}
	}()
	r := <-ch
	return r.l, r.err
}

// unmountUnder detaches every mount point under dir, deepest first: the
// kubelet's volume tmpfs mounts and containerd's overlay and shm mounts.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	prefix := filepath.Clean(dir) + "/"
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(unescapeMountPath(f[4])+"/", prefix) {
			points = append(points, unescapeMountPath(f[4]))
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// RemoveKubepodsCgroups kills what is left in the kubelet's cgroups
// (cgroup v1: one tree per controller) and removes them bottom-up.
func RemoveKubepodsCgroups() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	// A kubelet in a cgroup namespace (a systemd-nspawn machine) makes them
	// under its own cgroup, for example memory/process_api/ID/kubepods.
	for _, pattern := range []string{"/sys/fs/cgroup/*/*/kubepods*", "/sys/fs/cgroup/*/*/*/kubepods*"} {
		more, _ := filepath.Glob(pattern)
		roots = append(roots, more...)
	}
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods.slice"); err == nil && fi.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods.slice")
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for _, d := range dirs {
			if procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, p := range strings.Fields(string(procs)) {
					var pid int
					if _, err := fmt.Sscan(p, &pid); err == nil && pid > 1 {
						_ = unix.Kill(pid, unix.SIGKILL)
					}
				}
			}
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			// A process just killed takes a moment to leave its cgroup.
			for try := 0; try < 50; try++ {
				if err = os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, unix.EBUSY) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
