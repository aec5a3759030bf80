package subprocess

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu"
)

// helperEnv makes the test binary act as a discovery child (see TestMain).
const helperEnv = "SUBPROCESS_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child behaves as mode says, reading the request from stdin.
func child(mode string) int {
	os.Stderr.WriteString("child starting\n")
	switch mode {
	case "hang":
		time.Sleep(time.Hour)
	case "signal":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	case "garbage":
		os.Stdout.WriteString("not json\n")
		return 0
	case "exit":
		os.Stderr.WriteString("libvirt: something broke\n")
		return 3
	}
	err := Serve(context.Background(), os.Stdin, os.Stdout, func(_ context.Context, req Request) (*hostcpu.HostCPU, error) {
		if mode == "error" {
			return nil, errors.New("no libvirt here")
		}
		return &hostcpu.HostCPU{Arch: "x86_64", VirtType: req.VirtType, ModelFeatures: map[string][]string{"Penryn": {"sse4.1"}}}, nil
	})
	if err != nil {
		return 1
	}
	return 0
}

func runner(t *testing.T, mode string, log *bytes.Buffer) *Runner {
	return &Runner{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     append(os.Environ(), helperEnv+"="+mode),
		Timeout: 2 * time.Second,
		Logger:  slog.New(slog.NewTextHandler(log, nil)),
	}
}

func TestRunnerAnswers(t *testing.T) {
	var log bytes.Buffer
	h, err := runner(t, "ok", &log).Discover(t.Context(), Request{VirtType: "qemu"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Arch != "x86_64" || h.VirtType != "qemu" || h.ModelFeatures["Penryn"][0] != "sse4.1" {
		t.Errorf("snapshot did not survive the trip: %+v", h)
	}
	if !strings.Contains(log.String(), "child starting") {
		t.Errorf("the child's stderr is not in the log:\n%s", log.String())
	}
}

func TestRunnerCopiesStderr(t *testing.T) {
	var log, stderr bytes.Buffer
	r := runner(t, "exit", &log)
	r.Stderr = &stderr
	_, err := r.Discover(t.Context(), Request{})
	if want := "child starting\nlibvirt: something broke\n"; stderr.String() != want {
		t.Errorf("Stderr got %q, want %q", stderr.String(), want)
	}
	if strings.Contains(log.String(), "something broke") {
		t.Errorf("the child's stderr went to the logger as well:\n%s", log.String())
	}
	// The error still ends with the child's last words.
	if err == nil || !strings.Contains(err.Error(), "libvirt: something broke") {
		t.Errorf("err = %v", err)
	}
}

func TestRequestOptions(t *testing.T) {
	req := Request{
		LibvirtURI: "qemu:///embed?root=/x", VirtType: "qemu", StateDir: "/var/lib/x",
		ExpandModels: []string{"Penryn"}, CPUMapDir: "/cpu_map", LogLevel: "debug",
	}
	o := req.Options()
	if o.LibvirtURI != req.LibvirtURI || o.VirtType != req.VirtType || o.StateDir != req.StateDir ||
		o.CPUMapDir != req.CPUMapDir || !slices.Equal(o.ExpandModels, req.ExpandModels) {
		t.Errorf("Options() = %+v, lost part of %+v", o, req)
	}
	for level, want := range map[string]slog.Level{
		"debug": slog.LevelDebug, "WARN": slog.LevelWarn, "error": slog.LevelError, "": slog.LevelInfo, "loud": slog.LevelInfo,
	} {
		if got := (Request{LogLevel: level}).Level(); got != want {
			t.Errorf("Level() of %q = %v, want %v", level, got, want)
		}
	}
}

func TestRunnerFailures(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		want   string
		killed bool
	}{
		{"hang", "was killed", true},
		{"signal", "died on signal killed", false},
		{"garbage", "printed no valid answer", false},
		{"exit", "exit status 3; its stderr ended with: child starting | libvirt: something broke", false},
		{"error", "discovery child: no libvirt here", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var log bytes.Buffer
			r := runner(t, tc.mode, &log)
			if tc.mode == "hang" {
				r.Timeout = 300 * time.Millisecond
			}
			killed := false
			r.AfterKill = func() { killed = true }
			_, err := r.Discover(t.Context(), Request{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if killed != tc.killed {
				t.Errorf("AfterKill ran: %v, want %v", killed, tc.killed)
			}
			if tc.killed && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a timeout is not a DeadlineExceeded: %v", err)
			}
		})
	}
}

func TestRunnerStopsWithContext(t *testing.T) {
	var log bytes.Buffer
	r := runner(t, "hang", &log)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := r.Discover(ctx, Request{}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestServeRefusesNoRequest(t *testing.T) {
	err := Serve(t.Context(), strings.NewReader(""), &bytes.Buffer{}, func(context.Context, Request) (*hostcpu.HostCPU, error) {
		t.Error("discovered without a request")
		return nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "node-agent labels") {
		t.Errorf("err = %v", err)
	}
}
