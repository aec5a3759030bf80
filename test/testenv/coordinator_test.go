package testenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/config"
)

func TestCoordinatorConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("drain:\n  maxConcurrentNodes: 3\n  timeout: 5m\n"+
		"  pools: [{name: gpu, selector: gpu=true, maxConcurrentNodes: 1}]\nreboot:\n  slotHoldBound: 20m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	tests := []struct {
		name string
		args []string
		// want is what the coordinator reads back from the bytes.
		want func(*config.Config)
	}{
		{name: "defaults", args: nil, want: func(*config.Config) {}},
		{name: "flags, among others that are no keys of the coordinator",
			args: []string{"--labeller-enabled=false", "--drain-max-concurrent-nodes", "2", "--drain-timeout=20s", "--reboot-enabled=true",
				"--drain-slot-silence-bound", "30s", "--drain-lease-namespace=slots", "--no-such-flag"},
			want: func(c *config.Config) {
				c.Drain.MaxConcurrentNodes, c.Drain.Timeout.Duration = 2, 20*time.Second
				c.Drain.SlotSilenceBound.Duration, c.Drain.LeaseNamespace = 30*time.Second, "slots"
				c.Reboot.Enabled = true
			}},
		{name: "a file, a flag over it", args: []string{"--config", file, "--drain-timeout", "40s"},
			want: func(c *config.Config) {
				c.Drain.MaxConcurrentNodes, c.Drain.Timeout.Duration, c.Reboot.SlotHoldBound.Duration = 3, 40*time.Second, 20*time.Minute
				c.Drain.Pools = []config.PoolConfig{{Name: "gpu", Selector: "gpu=true", MaxConcurrentNodes: 1}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := CoordinatorConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			got, err := config.Parse(out, config.Default())
			if err != nil {
				t.Fatalf("the coordinator cannot read\n%s: %v", out, err)
			}
			want := def
			tt.want(&want)
			if got.Drain.MaxConcurrentNodes != want.Drain.MaxConcurrentNodes || got.Drain.Timeout != want.Drain.Timeout ||
				got.Drain.SlotSilenceBound != want.Drain.SlotSilenceBound || got.Drain.LeaseNamespace != want.Drain.LeaseNamespace ||
				got.Reboot.SlotHoldBound != want.Reboot.SlotHoldBound || len(got.Drain.Pools) != len(want.Drain.Pools) ||
				got.Reboot.Enabled != want.Reboot.Enabled {
				t.Errorf("read back %+v %+v from\n%s\nwant %+v %+v", got.Drain, got.Reboot.SlotHoldBound, out, want.Drain, want.Reboot.SlotHoldBound)
			}
			for i := range want.Drain.Pools {
				if g, w := got.Drain.Pools[i], want.Drain.Pools[i]; g.Name != w.Name || g.Selector != w.Selector || g.MaxConcurrentNodes != w.MaxConcurrentNodes {
					t.Errorf("pool %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
	// Agents that differ only in what the coordinator does not read agree.
	a, _ := CoordinatorConfig([]string{"--reboot-enabled=true", "--drain-timeout", "20s"})
	b, _ := CoordinatorConfig([]string{"--drain-timeout=20s", "--reboot-enabled", "--reboot-window-days=mon"})
	if string(a) != string(b) {
		t.Errorf("the same coordinator keys gave\n%s\nand\n%s", a, b)
	}
}
