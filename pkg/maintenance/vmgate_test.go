package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/pkg/vmdrain"
	vmspec "github.com/node-agent/node-agent/pkg/vmdrain/spec"
)

func TestVMGate(t *testing.T) {
	movable := vmdrain.VMPlan{VM: vmdrain.VM{Namespace: "vms", Name: "a"}, Way: vmdrain.Migrate, Targets: []string{"node-2"}}
	pinned := vmdrain.VMPlan{VM: vmdrain.VM{Namespace: "vms", Name: "b"}, Way: vmdrain.NoTarget, Why: "no other schedulable node has x=true"}
	stops := vmdrain.VMPlan{VM: vmdrain.VM{Namespace: "vms", Name: "c"}, Way: vmdrain.Stopped, Why: "evictionStrategy None: the drain stops it"}
	for _, c := range []struct {
		name   string
		mode   vmspec.Mode
		report vmdrain.Report
		err    error
		held   []string
		warned string
	}{
		{name: "not served", mode: vmspec.Wait},
		{name: "every VM can go", mode: vmspec.Wait, report: vmdrain.Report{Served: true, Plans: []vmdrain.VMPlan{movable}}},
		{name: "wait: the VMs that cannot leave hold", mode: vmspec.Wait, report: vmdrain.Report{Served: true, Plans: []vmdrain.VMPlan{movable, pinned, stops}},
			held: []string{"vms/b (no-target: no other schedulable node has x=true)", "vms/c (stopped: evictionStrategy None: the drain stops it)"}},
		{name: "proceed: none holds, a Warning names them", mode: vmspec.Proceed, report: vmdrain.Report{Served: true, Plans: []vmdrain.VMPlan{pinned}},
			warned: "VMsCannotMigrate: Draining anyway (drain.vmWithoutTarget proceed), though these VMs cannot leave by live migration: vms/b"},
		{name: "not granted: none holds, a Warning says so", mode: vmspec.Wait, err: &vmdrain.NotGrantedError{Err: errors.New("403")},
			warned: "VMsNotRead: The agent may not list"},
		{name: "unreadable: holds (fail closed)", mode: vmspec.Wait, err: errors.New("the apiserver is down"),
			held: []string{"the VMs on this node could not be read: the apiserver is down"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var warned []string
			g := &VMGate{Mode: c.mode,
				Read: func(context.Context) (vmdrain.Report, error) { return c.report, c.err },
				Warn: func(reason, msg string) { warned = append(warned, reason+": "+msg) }}
			for range 3 { // asked every interval: the Warning once
				got := g.Blockers(t.Context())
				var names []string
				for _, b := range got {
					names = append(names, b.Name)
				}
				if strings.Join(names, " | ") != strings.Join(c.held, " | ") {
					t.Fatalf("held %q, want %q", names, c.held)
				}
			}
			switch {
			case c.warned == "" && len(warned) != 0:
				t.Errorf("warned %q, want nothing", warned)
			case c.warned != "" && (len(warned) != 1 || !strings.HasPrefix(warned[0], c.warned)):
				t.Errorf("warned %q, want once %q", warned, c.warned)
			}
		})
	}
}

// The drain that follows a VM check takes the check's plan while it is
// younger than PlanReuse, and plans again after that, or when the check
// could not read the VMs.
func TestVMGatePlanHandedOn(t *testing.T) {
	now := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	reads := 0
	var fail error
	g := &VMGate{Mode: vmspec.Wait, Now: func() time.Time { return now },
		Read: func(context.Context) (vmdrain.Report, error) {
			reads++
			return vmdrain.Report{Served: true, Note: fmt.Sprint("read ", reads)}, fail
		}}
	plan := func(want string) {
		t.Helper()
		r, err := g.Plan(t.Context())
		if err != nil || r.Note != want {
			t.Fatalf("plan %q, %v; want %q", r.Note, err, want)
		}
	}
	plan("read 1") // no check yet: planned
	g.Blockers(t.Context())
	now = now.Add(PlanReuse - time.Second)
	plan("read 2") // the check's plan, taken on
	now = now.Add(time.Second)
	plan("read 3") // too old: planned again
	fail = errors.New("the apiserver is down")
	g.Blockers(t.Context())
	fail = nil
	plan("read 5") // the failed check left the old plan, which is too old
	if reads != 5 {
		t.Errorf("%d reads, want 5", reads)
	}
}
