package property

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/node-agent/node-agent/pkg/shutdown"
	"github.com/node-agent/node-agent/test/testenv"
)

// A kwok node has no host, so each node gets a stand-in for the one part of
// its host the reboot controller talks to: systemd-logind's Manager.Reboot,
// on a private dbus-daemon that the node's agent dials as its system bus
// (shutdown.systemBusAddress). The agent's own logind code runs unchanged;
// a Reboot call tells the bed, which plays the reboot (bed.playReboot).

const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

// requireDBusDaemon finds dbus-daemon (hack/install-deps.sh dbus), or skips
// the test, or fails it under NODE_AGENT_INTEGRATION=1 as a missing
// control-plane binary does.
func requireDBusDaemon(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("dbus-daemon")
	if err == nil {
		return path
	}
	if os.Getenv(testenv.IntegrationEnv) == "1" {
		t.Fatalf("dbus-daemon not found (%v); run hack/install-deps.sh dbus (a failure, not a skip, because %s=1)", err, testenv.IntegrationEnv)
	}
	t.Skipf("dbus-daemon not found (%v); run hack/install-deps.sh dbus", err)
	return ""
}

// hostBus is one node's private system bus with logind's stand-in on it.
type hostBus struct {
	address string
	cmd     *exec.Cmd
	exited  chan struct{}
	conn    *dbus.Conn
}

// logindStandIn answers Manager.Reboot as logind does (at once, the host
// going down afterwards) and tells the bed.
type logindStandIn struct {
	node     string
	onReboot func(node string)
}

// Reboot is org.freedesktop.login1.Manager.Reboot(interactive).
func (l logindStandIn) Reboot(bool) *dbus.Error {
	l.onReboot(l.node)
	return nil
}

// startHostBus starts node's bus in dir (short: a socket path must fit in
// sun_path's 108 bytes) and puts the stand-in on it.
func startHostBus(t *testing.T, daemon, dir, node string, onReboot func(string)) *hostBus {
	t.Helper()
	sock := filepath.Join(dir, "bus")
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, busConfig, sock), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	// Should the test binary die without its cleanups, the daemon goes too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dbus-daemon for %s: %v", node, err)
	}
	b := &hostBus{address: "unix:path=" + sock, cmd: cmd, exited: make(chan struct{})}
	t.Cleanup(b.stop)
	// The daemon prints its address once it listens.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, b.address) {
		t.Fatalf("dbus-daemon for %s: address %q, %v", node, line, err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(b.exited)
	}()
	conn, err := dbus.Connect(b.address)
	if err != nil {
		t.Fatalf("logind stand-in for %s: %v", node, err)
	}
	b.conn = conn
	if err := conn.Export(logindStandIn{node: node, onReboot: onReboot}, shutdown.LogindPath, shutdown.LogindInterface); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(shutdown.LogindBusName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("logind stand-in for %s: owning %s: reply %v, %v", node, shutdown.LogindBusName, reply, err)
	}
	return b
}

func (b *hostBus) stop() {
	if b.conn != nil {
		_ = b.conn.Close()
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
}
