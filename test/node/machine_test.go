package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/test/testenv"
)

// machineNode is a real node that reboots: a systemd-nspawn machine booted
// from hack/rootfs.sh's rootfs, with systemd, dbus and logind, where
// containerd and the kubelet run as systemd units. It lives in a network
// namespace of the test's (testenv.NodeNetwork), so the kubelet has a node
// IP that is not loopback.
//
// Binaries come from the host, bound in read-only: containerd, runc and the
// CNI plugins of the Debian packages hack/install-deps.sh installs (the
// rootfs is the same Debian release), and the kubelet from bin/.
// containerd's and the kubelet's state are host directories bound in, as a
// real node's disk: overlayfs (the snapshotter) cannot sit on the machine's
// own overlay root, and images survive reboots.
//
// systemd-nspawn mounts the cgroup controllers and /proc/sys read-only; the
// unit node-prep remounts them read-write inside the machine (its own view:
// the machine has a cgroup namespace) before containerd and the kubelet
// start, as a real host has them.
type machineNode struct {
	name string
	c    *testenv.Container
	net  *testenv.NodeNetwork
	dir  string
}

// machineMounts are host paths bound into the machine read-only.
var machineMounts = []string{
	"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/bin/ctr", "/usr/sbin/runc", "/usr/lib/cni",
}

func newMachineNode(t *testing.T, env *testenv.Env, bin, name string, images []string, kubeletExtra string) *machineNode {
	t.Helper()
	rootfs := testenv.RequireContainer(t)
	dir, err := os.MkdirTemp("", "na-mach-")
	if err != nil {
		t.Fatal(err)
	}
	m := &machineNode{name: name, dir: dir}
	t.Cleanup(func() {
		// After the container's own cleanup (registered later, run earlier).
		_ = os.RemoveAll(dir)
	})
	for _, d := range []string{"etc/cni", "containerd", "kubelet", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, img := range images {
		// Hard links would cross file systems; the archives are small
		// but for node-agent's, so link where possible, else copy.
		dst := filepath.Join(dir, "images", fmt.Sprintf("%d.tar", i))
		if err := os.Link(img, dst); err != nil {
			data, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	m.net, err = env.NewNodeNetwork(strings.TrimPrefix(filepath.Base(dir), "na-mach-"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.net.Close(); err != nil {
			t.Errorf("removing the machine's network: %v", err)
		}
	})
	m.writeConfig(t, env, kubeletExtra)

	binds := []testenv.Bind{
		{Host: filepath.Join(dir, "etc"), Container: "/etc/node-test", ReadOnly: true},
		{Host: filepath.Join(dir, "images"), Container: "/var/lib/node-images", ReadOnly: true},
		{Host: filepath.Join(dir, "containerd"), Container: "/var/lib/containerd"},
		{Host: filepath.Join(dir, "kubelet"), Container: "/var/lib/kubelet"},
		{Host: filepath.Join(bin, testenv.BinKubelet), Container: "/usr/bin/kubelet", ReadOnly: true},
		// The kubelet's OOM watcher reads the kernel log.
		{Host: "/dev/kmsg", Container: "/dev/kmsg"},
	}
	for _, p := range machineMounts {
		binds = append(binds, testenv.Bind{Host: p, Container: p, ReadOnly: true})
	}
	m.c = testenv.NewContainer(t, testenv.ContainerOptions{Rootfs: rootfs, Binds: binds, ExtraArgs: []string{"--network-namespace-path=" + m.net.NSPath(),
		// systemd-nspawn drops these by default. The kubelet reads
		// /dev/kmsg (its OOM watcher), which needs CAP_SYSLOG; the CNI
		// bridge plugin makes the bridge and veths in the machine's own
		// network namespace, which needs CAP_NET_ADMIN; runc gives each
		// container a session keyring, with system calls nspawn's
		// seccomp filter refuses unless allowed.
		"--capability=CAP_SYSLOG,CAP_NET_ADMIN", "--system-call-filter=@keyring"}})
	m.writeUnits(t)
	t.Cleanup(func() {
		// Whatever the test left running: the machine first (its kubelet
		// and containers go with its PID namespace), then the cgroups.
		if m.c.Running() {
			m.c.Kill()
		}
	})
	return m
}

func (m *machineNode) writeConfig(t *testing.T, env *testenv.Env, kubeletExtra string) {
	t.Helper()
	etc := filepath.Join(m.dir, "etc")
	containerd := testenv.ContainerdConfig(testenv.ContainerdPaths{
		Root: "/var/lib/containerd", State: "/run/containerd", Socket: "/run/containerd/containerd.sock",
		Opt: "/var/lib/containerd/opt", CNIConfDir: "/etc/node-test/cni",
	}, pauseImage)
	m.setKubeletConfig(t, kubeletExtra)
	files := map[string]string{
		"containerd.toml":        containerd,
		"cni/10-bridge.conflist": m.net.CNIConfig("/var/lib/cni/networks"),
		"ca.crt":                 string(env.CAPEM()),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.NodeKubeconfig(filepath.Join(etc, "kubelet.kubeconfig"), m.name, m.net.APIServer()); err != nil {
		t.Fatal(err)
	}
}

// setKubeletConfig writes the kubelet's configuration; it takes effect at
// the kubelet's next start (a reboot).
func (m *machineNode) setKubeletConfig(t *testing.T, extra string) {
	t.Helper()
	cfg, err := testenv.KubeletConfig(testenv.KubeletPaths{
		RuntimeSocket: "/run/containerd/containerd.sock", PodLogsDir: "/var/log/pods", ClientCAFile: "/etc/node-test/ca.crt",
	}, m.net.NodeIP(), extra)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.dir, "etc", "kubelet.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (m *machineNode) writeUnits(t *testing.T) {
	t.Helper()
	units := map[string]string{
		"node-prep.service": `[Unit]
Description=Make the cgroup controllers and /proc/sys writable, as on a real host (systemd-nspawn mounts them read-only)
DefaultDependencies=no
After=local-fs.target
Before=containerd.service kubelet.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c"; done; mount -o remount,bind,rw /proc/sys'
`,
		"containerd.service": `[Unit]
Description=containerd
Requires=node-prep.service
After=node-prep.service
[Service]
ExecStart=/usr/bin/containerd --config /etc/node-test/containerd.toml
# As containerd's own unit: the shims and containers are not in this unit's
# processes to kill, and it manages its children's cgroups.
Delegate=yes
KillMode=process
Restart=always
[Install]
WantedBy=multi-user.target
`,
		"node-images.service": `[Unit]
Description=Import the node's images (no registry is reachable)
Requires=containerd.service
After=containerd.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'until ctr -a /run/containerd/containerd.sock version >/dev/null 2>&1; do sleep 0.2; done; for f in /var/lib/node-images/*.tar; do ctr -a /run/containerd/containerd.sock -n k8s.io images import "$f"; done'
[Install]
WantedBy=multi-user.target
`,
		"kubelet.service": fmt.Sprintf(`[Unit]
Description=kubelet
Requires=containerd.service node-images.service
After=containerd.service node-images.service
[Service]
ExecStart=/usr/bin/kubelet --config=/etc/node-test/kubelet.yaml --kubeconfig=/etc/node-test/kubelet.kubeconfig --hostname-override=%s --node-ip=%s --v=2
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
`, m.name, m.net.NodeIP()),
	}
	for name, content := range units {
		if err := m.c.WriteFile("/etc/systemd/system/"+name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(content, "[Install]") {
			if err := m.c.Symlink("/etc/systemd/system/"+name, "/etc/systemd/system/multi-user.target.wants/"+name); err != nil {
				t.Fatal(err)
			}
		}
	}
	// debootstrap's minbase has no /etc/hosts (netbase would bring it), and
	// containerd copies the node's into every pod sandbox.
	if err := m.c.WriteFile("/etc/hosts", []byte("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Real drains take longer than logind's default 5 s delay.
	if err := m.c.WriteFile("/etc/systemd/logind.conf.d/50-node-test.conf", []byte("[Login]\nInhibitDelayMaxSec=120\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// boot boots the machine and waits until its kubelet's Node is Ready.
func (m *machineNode) boot(t *testing.T, env *testenv.Env) time.Duration {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := m.c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if state, err := m.c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	} else if state != "running" {
		out, _ := m.c.Exec(ctx, "journalctl", "--no-pager", "-n", "60", "-u", "kubelet", "-u", "containerd", "-u", "node-prep", "-u", "node-images")
		t.Fatalf("machine booted %s:\n%s", state, out)
	}
	for {
		node, err := env.Client().CoreV1().Nodes().Get(ctx, m.name, metav1.GetOptions{})
		if err == nil && nodeReadyAfter(node, began) {
			return time.Since(began)
		}
		if ctx.Err() != nil {
			t.Fatalf("Node %s not Ready %s after boot; errors in the kubelet's and containerd's journal:\n%s", m.name, time.Since(began).Round(time.Second), m.journalErrors(context.Background()))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// journalErrors returns the last error lines of the machine's kubelet and
// containerd.
func (m *machineNode) journalErrors(ctx context.Context) string {
	out, _ := m.c.Exec(ctx, "sh", "-c", "journalctl --no-pager -u kubelet -u containerd -u node-images | grep -E ' (E[0-9]{4}|F[0-9]{4}) |level=error|level=fatal|rror' | tail -n 12")
	return string(out)
}

// nodeReadyAfter is true when the Node is Ready and its kubelet has posted
// that since t (so a Ready left from before a reboot does not count).
func nodeReadyAfter(n *corev1.Node, t time.Time) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(t.Add(-time.Second))
		}
	}
	return false
}

// inhibitors returns node-agent's delay locks as logind lists them.
func (m *machineNode) inhibitors(ctx context.Context) ([]string, error) {
	out, err := m.c.Exec(ctx, "systemd-inhibit", "--list", "--no-pager", "--no-legend")
	if err != nil {
		return nil, err
	}
	var locks []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// WHO UID USER PID COMM WHAT WHY... MODE
		if len(f) >= 7 && f[0] == "node-agent" && f[5] == "shutdown" && f[len(f)-1] == "delay" {
			locks = append(locks, strings.Join(f, " "))
		}
	}
	return locks, nil
}

// kubeletLocks returns the kubelet's own delay locks.
func (m *machineNode) kubeletLocks(ctx context.Context) int {
	out, _ := m.c.Exec(ctx, "systemd-inhibit", "--list", "--no-pager", "--no-legend")
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "kubelet" {
			n++
		}
	}
	return n
}
