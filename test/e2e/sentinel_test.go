//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

// TestSentinelCommandOnRealSystemd runs reboot sentinel commands the way the
// reboot controller will (pkg/reboot/systemd: a transient oneshot unit over
// the system bus, its ExecMainStatus read back) against the real systemd of
// the e2e machine: exit statuses come back as the command's, systemd's own
// failures and signals come back as errors (never as "no reboot needed"),
// "$" and "%" reach the command unexpanded, and no unit is left behind.
func TestSentinelCommandOnRealSystemd(t *testing.T) {
	rootfs := testenv.RequireContainer(t)
	probe := filepath.Join(t.TempDir(), "sentinel-probe")
	build := exec.Command("go", "build", "-o", probe, "./cmd/sentinel-probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sentinel-probe: %v\n%s", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	c := testenv.NewContainer(t, testenv.ContainerOptions{Rootfs: rootfs, Binds: []testenv.Bind{
		{Host: probe, Container: "/usr/local/bin/sentinel-probe", ReadOnly: true},
	}})
	bootReady(ctx, t, c)

	for _, tc := range []struct {
		argv    []string
		status  int
		wantErr string // "" wants the status
	}{
		{argv: []string{"/usr/bin/true"}, status: 0},
		{argv: []string{"/usr/bin/false"}, status: 1},
		{argv: []string{"/bin/sh", "-c", "exit 7"}, status: 7},
		{argv: []string{"/usr/bin/test", "-e", "/run/reboot-required"}, status: 1},
		{argv: []string{"/bin/sh", "-c", "touch /run/reboot-required"}, status: 0},
		{argv: []string{"/usr/bin/test", "-e", "/run/reboot-required"}, status: 0},
		// systemd would expand $X itself; the runner escapes it, so the
		// shell sees it.
		{argv: []string{"/bin/sh", "-c", "X=3; exit $X"}, status: 3},
		// "%n" and "$HOME" arrive as written: 2 and 5 characters.
		{argv: []string{"/bin/sh", "-c", "exit ${#1}", "sh", "%n"}, status: 2},
		{argv: []string{"/bin/sh", "-c", "exit ${#1}", "sh", "$HOME"}, status: 5},
		{argv: []string{"/bin/sh", "-c", "kill -9 $$"}, wantErr: "result signal"},
		{argv: []string{"/nonexistent"}, wantErr: "systemd could not run the command"},
		{argv: []string{"/usr/bin/sleep", "30"}, wantErr: "killed after 5s"},
	} {
		out, err := c.Exec(ctx, append([]string{"/usr/local/bin/sentinel-probe"}, tc.argv...)...)
		if err != nil {
			t.Fatalf("sentinel-probe %q: %v\n%s", tc.argv, err, out)
		}
		var got struct {
			Status int    `json:"status"`
			Err    string `json:"err"`
		}
		if err := json.Unmarshal([]byte(lastLine(string(out))), &got); err != nil {
			t.Fatalf("sentinel-probe %q printed %q: %v", tc.argv, out, err)
		}
		switch {
		case tc.wantErr == "" && (got.Err != "" || got.Status != tc.status):
			t.Errorf("%q: status %d, error %q; want status %d", tc.argv, got.Status, got.Err, tc.status)
		case tc.wantErr != "" && !strings.Contains(strings.ToLower(got.Err), tc.wantErr):
			t.Errorf("%q: status %d, error %q; want an error mentioning %q", tc.argv, got.Status, got.Err, tc.wantErr)
		default:
			t.Logf("%q: status %d, error %q", tc.argv, got.Status, got.Err)
		}
	}
	if b, _ := c.Exec(ctx, "systemctl", "list-units", "--all", "--no-legend", "node-agent-*"); strings.TrimSpace(string(b)) != "" {
		t.Errorf("units left behind:\n%s", b)
	}
	if b, _ := c.Exec(ctx, "systemctl", "--failed", "--no-legend"); strings.TrimSpace(string(b)) != "" {
		t.Errorf("failed units:\n%s", b)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
