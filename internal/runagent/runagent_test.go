package runagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/node-agent/node-agent/pkg/agent"
	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/hostcpu"
)

// nowhere is a connection to no apiserver that counts the requests made on
// it: building the agent must make none.
func nowhere(requests *atomic.Int32) *rest.Config {
	return &rest.Config{
		Host: "https://127.0.0.1:1",
		WrapTransport: func(http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				requests.Add(1)
				return nil, errors.New("no apiserver in this test: " + r.Method + " " + r.URL.Path)
			})
		},
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// discoverNothing stands in for the discovery helper: the test must not
// look at the host's CPU, /dev/kvm or libvirt.
func discoverNothing(context.Context, config.LabellerConfig) (*hostcpu.HostCPU, error) {
	return nil, errors.New("no discovery in this test")
}

// build is New with cfg, then the agent's components, as Run builds them.
func build(t *testing.T, cfg config.Config, configFile string) ([]agent.Component, int32) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the test's config: %v", err)
	}
	var requests atomic.Int32
	a, err := New(Options{
		Config: cfg, ConfigFile: configFile, REST: nowhere(&requests),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Discover: discoverNothing,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	components, err := a.Build(record.NewFakeRecorder(100))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return components, requests.Load()
}

func names(cs []agent.Component) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name())
	}
	return out
}

// Every component is built from one config, against an apiserver that is
// not there, and nothing is contacted while building: not the apiserver,
// not the host's devices (the labeller's discovery is a fake), not the
// system bus (the shutdown guard, the sentinel command and logind's reboot
// connect only when they run).
func TestNewBuildsEveryComponent(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "node-1"
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	cfg.Labeller.Enabled = true
	cfg.Maintenance.NodeMaintenance = true
	cfg.Shutdown.Enabled = true
	cfg.Shutdown.SystemBusAddress = "unix:path=" + filepath.Join(t.TempDir(), "no-bus")
	cfg.Reboot.Enabled = true
	cfg.Reboot.SentinelCommand = []string{"/usr/bin/needs-restarting", "-r"}
	cfg.Reboot.BlockingPodSelector = "reboot-blocker=yes"
	cfg.Reboot.PrometheusURL = "http://127.0.0.1:1"
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("labeller:\n  enabled: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	components, requests := build(t, cfg, file)
	want := []string{"labeller", "podaccess", "confinement", "slots", "selfdrain", "reboot", "shutdown", "config"}
	if got := names(components); !reflect.DeepEqual(got, want) {
		t.Errorf("components %v, want %v", got, want)
	}
	if requests != 0 {
		t.Errorf("building the agent made %d requests to the apiserver, want none", requests)
	}
}

// With everything optional off, the agent is the maintenance controller and
// the pod access report it needs.
func TestNewBuildsOnlyWhatIsOn(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "node-1"
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	cfg.Labeller.Enabled = false
	cfg.Shutdown.Enabled = false
	cfg.Reboot.Enabled = false

	components, requests := build(t, cfg, "")
	if got, want := names(components), []string{"podaccess", "confinement", "slots", "selfdrain"}; !reflect.DeepEqual(got, want) {
		t.Errorf("components %v, want %v", got, want)
	}
	if requests != 0 {
		t.Errorf("%d requests, want none", requests)
	}
}

func TestNewRefusesWithoutAConnection(t *testing.T) {
	cfg := config.Default()
	cfg.NodeName = "node-1"
	if _, err := New(Options{Config: cfg}); err == nil {
		t.Fatal("New without REST: no error")
	}
}
