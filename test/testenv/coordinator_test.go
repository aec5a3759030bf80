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
	if err := os.WriteFile(file, []byte("slots:\n  limit: 3\n  pools: [{name: gpu, selector: gpu=true, limit: 1}]\n"+
		"drain:\n  timeout: 5m\nreboot:\n  slotHoldBound: 20m\n"), 0o600); err != nil {
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
			args: []string{"--labeller-enabled=false", "--slots-limit", "2", "--drain-timeout=20s", "--reboot-enabled=true",
				"--slots-heartbeat-bound", "30s", "--slots-namespace=slots", "--no-such-flag"},
			want: func(c *config.Config) {
				c.Slots.Limit, c.Drain.Timeout.Duration = 2, 20*time.Second
				c.Slots.HeartbeatBound.Duration, c.Slots.Namespace = 30*time.Second, "slots"
				c.Reboot.Enabled = true
			}},
		{name: "a file, a flag over it", args: []string{"--config", file, "--drain-timeout", "40s"},
			want: func(c *config.Config) {
				c.Slots.Limit, c.Drain.Timeout.Duration, c.Reboot.SlotHoldBound.Duration = 3, 40*time.Second, 20*time.Minute
				c.Slots.Pools = []config.PoolConfig{{Name: "gpu", Selector: "gpu=true", Limit: 1}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := CoordinatorConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := config.Parse(out, config.Default())
			if err != nil {
				t.Fatalf("the coordinator cannot read\n%s: %v", out, err)
			}
			want := def
			tt.want(&want)
			if got.Slots.Limit != want.Slots.Limit || got.Drain.Timeout != want.Drain.Timeout ||
				got.Slots.HeartbeatBound != want.Slots.HeartbeatBound || got.Slots.Namespace != want.Slots.Namespace ||
				got.Reboot.SlotHoldBound != want.Reboot.SlotHoldBound || len(got.Slots.Pools) != len(want.Slots.Pools) ||
				got.Reboot.Enabled != want.Reboot.Enabled {
				t.Errorf("read back %+v %+v %+v from\n%s\nwant %+v %+v %+v", got.Slots, got.Drain, got.Reboot.SlotHoldBound, out, want.Slots, want.Drain, want.Reboot.SlotHoldBound)
			}
			for i := range want.Slots.Pools {
				if g, w := got.Slots.Pools[i], want.Slots.Pools[i]; g.Name != w.Name || g.Selector != w.Selector || g.Limit != w.Limit {
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
