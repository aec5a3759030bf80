package reboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type fakeRunner struct {
	status int
	err    error
	calls  [][]string
}

func (f *fakeRunner) Run(_ context.Context, argv []string) (int, error) {
	f.calls = append(f.calls, argv)
	return f.status, f.err
}

func TestNeedChecker(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "reboot-required")
	if err := os.WriteFile(present, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	cmd := []string{"/usr/bin/needs-restarting", "-r"}

	tests := []struct {
		name      string
		file      string
		cmd       []string
		runner    *fakeRunner
		want      bool
		wantWhy   string
		wantErr   string
		wantCalls int
	}{
		{name: "file present", file: present, want: true, wantWhy: "sentinel file " + present + " exists"},
		{name: "file absent", file: absent},
		{name: "file present: the command does not run", file: present, cmd: cmd, runner: &fakeRunner{status: 1}, want: true},
		{name: "file absent, command exits 0", file: absent, cmd: cmd, runner: &fakeRunner{}, want: true, wantWhy: "sentinel command /usr/bin/needs-restarting -r exited 0", wantCalls: 1},
		{name: "file absent, command exits 1", file: absent, cmd: cmd, runner: &fakeRunner{status: 1}, wantCalls: 1},
		{name: "no file, command exits 0", cmd: cmd, runner: &fakeRunner{}, want: true, wantCalls: 1},
		{name: "command cannot run: unknown, not 'not needed'", cmd: cmd, runner: &fakeRunner{err: errors.New("killed by SIGKILL")}, wantErr: "sentinel command /usr/bin/needs-restarting -r: killed by SIGKILL", wantCalls: 1},
		{name: "command without a runner", cmd: cmd, wantErr: "no way to run it"},
		{name: "file in a directory the agent cannot search", file: filepath.Join(present, "x"), wantErr: "looking for the sentinel file"},
		{name: "nothing configured", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NeedChecker{SentinelFile: tt.file, SentinelCommand: tt.cmd}
			if tt.runner != nil {
				c.Runner = tt.runner
			}
			got, err := c.Check(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				if got.Needed {
					t.Error("Needed with an error")
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got.Needed != tt.want {
				t.Errorf("Needed = %v, want %v (%s)", got.Needed, tt.want, got.Why)
			}
			if tt.wantWhy != "" && got.Why != tt.wantWhy {
				t.Errorf("Why = %q, want %q", got.Why, tt.wantWhy)
			}
			calls := 0
			if tt.runner != nil {
				calls = len(tt.runner.calls)
				if calls > 0 && !reflect.DeepEqual(tt.runner.calls[0], tt.cmd) {
					t.Errorf("ran %q, want %q", tt.runner.calls[0], tt.cmd)
				}
			}
			if calls != tt.wantCalls {
				t.Errorf("command ran %d times, want %d", calls, tt.wantCalls)
			}
		})
	}
}

func TestQuoteArgs(t *testing.T) {
	if got, want := quoteArgs([]string{"/bin/sh", "-c", "test -e /run/x", ""}), `/bin/sh -c "test -e /run/x" ""`; got != want {
		t.Errorf("quoteArgs = %s, want %s", got, want)
	}
}
