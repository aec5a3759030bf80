package metrics

import "testing"

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		name    string
		counter bool
		ok      bool
	}{
		{"node_agent_drain_evictions_total", true, true},
		{"node_agent_drain_slot_held", false, true},
		{"node_agent_reboot_required_since_timestamp_seconds", false, true},
		{"node_agent_evictions_total", true, false},                 // no subsystem
		{"node_agent_drain_evictions", true, false},                 // a counter without _total
		{"node_agent_drain_pending_total", false, false},            // _total on a gauge
		{"node_agent_maintenance_start_time_seconds", false, false}, // a Unix time
		{"kured_reboot_required", false, false},
		{"node_agent_Drain_x", false, false},
	} {
		if err := CheckName(tt.name, tt.counter); (err == nil) != tt.ok {
			t.Errorf("CheckName(%s, %v) = %v, want ok %v", tt.name, tt.counter, err, tt.ok)
		}
	}
}
