package selfdrain

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// A drain that follows the node's VMs shows each one's progress in its
// status, and reads them once more at the end, so the final status says
// where each went.
func TestDrainShowsVMProgress(t *testing.T) {
	h := newHarness(t, testPod("virt-launcher-a"))
	h.onEvict(func(eviction) error { return nil })
	var polls atomic.Int32
	h.engine.VMProgress = func(context.Context) func(context.Context) ([]VMStatus, error) {
		return func(context.Context) ([]VMStatus, error) {
			if polls.Add(1) == 1 {
				return []VMStatus{{Name: "vms/a", Phase: "Migrating", Target: "node-2", Message: "migrating to node-2"}}, nil
			}
			return []VMStatus{{Name: "vms/a", Phase: "Migrated", Target: "node-2", Message: "live-migrated to node-2"}}, nil
		}
	}
	h.run(func() {
		if _, err := h.engine.BeginAndDrain(context.Background(), Request{Trigger: TriggerAnnotation, Reason: "vm test"}); err != nil {
			t.Error(err)
		}
	}, nil)
	st := h.status()
	if st.Phase != PhaseSucceeded || len(st.VMs) != 1 || st.VMs[0].Phase != "Migrated" || st.VMs[0].Target != "node-2" {
		t.Fatalf("status %s, want Succeeded with vms/a Migrated to node-2", st.Encode())
	}
	if n := polls.Load(); n < 2 {
		t.Errorf("%d polls, want the first and a final one", n)
	}
}

func TestCapVMs(t *testing.T) {
	var vms []VMStatus
	for i := range MaxVMsShown + 10 {
		vms = append(vms, VMStatus{Name: fmt.Sprintf("vms/%03d", i)})
	}
	got := capVMs(vms)
	if len(got) != MaxVMsShown || got[MaxVMsShown-1].Name != "and 11 more" || got[0].Name != "vms/000" {
		t.Errorf("capped to %d, last %q", len(got), got[len(got)-1].Name)
	}
	if got := capVMs(vms[:3]); len(got) != 3 {
		t.Errorf("3 VMs capped to %d", len(got))
	}
}
