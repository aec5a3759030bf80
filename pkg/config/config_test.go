package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/node-agent/node-agent/pkg/hostcpu"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "empty file keeps defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.Labeller.MinCPUModel != "Penryn" || c.MetricsBindAddress != ":9464" {
				t.Errorf("defaults lost: %+v", c)
			}
		}},
		{name: "nested keys", yaml: "labeller:\n  minCPUModel: Haswell\n  obsoleteCPUModels: [Nehalem]\ndrain:\n  timeout: 90s\n", check: func(t *testing.T, c Config) {
			if c.Labeller.MinCPUModel != "Haswell" || len(c.Labeller.ObsoleteCPUModels) != 1 || c.Drain.Timeout.Duration != 90*time.Second {
				t.Errorf("not applied: %+v", c)
			}
			if c.Drain.TaintKey != "kubevirt.io/drain" {
				t.Errorf("sibling default lost: %q", c.Drain.TaintKey)
			}
		}},
		{name: "unknown top-level key", yaml: "foo: 1\n", wantErr: `unknown field "foo"`},
		{name: "unknown nested key", yaml: "drain:\n  timeOut: 1s\n", wantErr: `unknown field "drain.timeOut"`},
		{name: "keys are case-sensitive", yaml: "labeller:\n  minCpuModel: x\n", wantErr: `unknown field "labeller.minCpuModel"`},
		{name: "bad duration names the key", yaml: "shutdown:\n  drainBudget: 5 minutes\n", wantErr: "shutdown.drainBudget"},
		{name: "bad duration beside top-level keys", yaml: "nodeName: node-1\nlogLevel: info\ndrain:\n  timeout: soon\n", wantErr: "drain.timeout"},
		{name: "wrong type", yaml: "drain:\n  maxConcurrentNodes: many\n", wantErr: "maxConcurrentNodes"},
		{name: "not yaml", yaml: "a: [1\n", wantErr: "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), Default())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestValidate(t *testing.T) {
	valid := Default()
	valid.NodeName = "node-1"
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string
	}{
		{name: "defaults with a node name are valid", mutate: func(*Config) {}},
		{name: "empty node name", mutate: func(c *Config) { c.NodeName = "" }, wantErr: "NODE_NAME"},
		{name: "node name not a DNS subdomain", mutate: func(c *Config) { c.NodeName = "Node_1" }, wantErr: "nodeName"},
		{name: "bad taint key", mutate: func(c *Config) { c.Drain.TaintKey = "a b" }, wantErr: "drain.taintKey"},
		{name: "bad selector", mutate: func(c *Config) { c.Drain.PodSelector = "a in (" }, wantErr: "drain.podSelector"},
		{name: "zero concurrency", mutate: func(c *Config) { c.Drain.MaxConcurrentNodes = 0 }, wantErr: "drain.maxConcurrentNodes"},
		{name: "bad log format", mutate: func(c *Config) { c.LogFormat = "xml" }, wantErr: "logFormat"},
		// "" turns the subtraction off, as KubeVirt has it.
		{name: "empty min model is valid", mutate: func(c *Config) { c.Labeller.MinCPUModel = "" }},
		{name: "min model with spaces", mutate: func(c *Config) { c.Labeller.MinCPUModel = " Penryn" }, wantErr: "labeller.minCPUModel"},
		{name: "empty obsolete entry", mutate: func(c *Config) { c.Labeller.ObsoleteCPUModels = []string{""} }, wantErr: "obsoleteCPUModels"},
		{name: "no budget", mutate: func(c *Config) { c.Shutdown.DrainBudget.Duration = 0 }, wantErr: "shutdown.drainBudget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestLoadFlagsWinOverFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("nodeName: from-file\nlabeller:\n  minCPUModel: Haswell\n  obsoleteCPUModels: [a]\ndrain:\n  timeout: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--min-cpu-model=Skylake-Client", "--obsolete-cpu-models=b,c", "--drain-timeout=2m"}); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, Default(), fs)
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeName != "from-file" {
		t.Errorf("nodeName = %q, want the file's", got.NodeName)
	}
	if got.Labeller.MinCPUModel != "Skylake-Client" || got.Drain.Timeout.Duration != 2*time.Minute {
		t.Errorf("flags did not win: %+v", got)
	}
	if strings.Join(got.Labeller.ObsoleteCPUModels, ",") != "b,c" {
		t.Errorf("obsoleteCPUModels = %v, want [b c]", got.Labeller.ObsoleteCPUModels)
	}
}

// Every key must have a flag: the reference docs and the "keys mirror the
// flags" promise are built on that.
func TestEveryKeyHasAFlag(t *testing.T) {
	c := Default()
	paths := map[uintptr]string{}
	collectPaths(reflect.ValueOf(&c).Elem(), "", paths)
	documented := map[string]bool{}
	for _, k := range Keys() {
		documented[k.Path] = true
	}
	for _, p := range paths {
		if !documented[p] {
			t.Errorf("config key %s has no flag", p)
		}
	}
}

// An explicit empty minCPUModel, in the file or on the command line, must
// reach the policy as empty and not fall back to the default Penryn.
func TestLoadEmptyMinCPUModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("nodeName: node-1\nlabeller:\n  minCPUModel: \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	base := Default()
	base.AddFlags(fs)
	c, err := Load(path, base, fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Labeller.MinCPUModel != "" {
		t.Errorf("minCPUModel from the file = %q; want empty", c.Labeller.MinCPUModel)
	}

	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	c = Default()
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--min-cpu-model="}); err != nil {
		t.Fatal(err)
	}
	if c.Labeller.MinCPUModel != "" {
		t.Errorf("--min-cpu-model= gave %q; want empty", c.Labeller.MinCPUModel)
	}
}

// The config key's "auto" and discovery's are one name: the wiring passes
// labeller.libvirtURI through unchanged.
func TestLibvirtURIAutoIsDiscoverys(t *testing.T) {
	if hostcpu.AutoURI != LibvirtURIAuto {
		t.Errorf("hostcpu.AutoURI %q and config.LibvirtURIAuto %q must be one name", hostcpu.AutoURI, LibvirtURIAuto)
	}
}
