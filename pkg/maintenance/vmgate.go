package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/vmdrain"
	vmspec "github.com/node-agent/node-agent/pkg/vmdrain/spec"
)

// VMGate is the check of the VMs on the node before a maintenance takes
// its slot, and a blocker of the reboot controller before its drain
// (drain.vmWithoutTarget): each VM that cannot leave the node by
// live migration (vmdrain.Way.Held) holds the maintenance in Wait mode,
// named with why; in Proceed mode none holds, and Warn names them once.
//
// A cluster that does not serve VMs holds nothing. One whose apiserver
// refuses to list them (the agent was not granted
// deploy/components/kubevirt-vms) holds nothing either,
// and Warn says so once: VM awareness is then off. Any other failure to
// read them holds the maintenance (fail closed), saying why.
type VMGate struct {
	Read func(ctx context.Context) (vmdrain.Report, error)
	Mode vmspec.Mode
	// Warn reports what does not hold the maintenance but an admin must
	// hear of, as a Warning Event; each text once in a row.
	Warn func(reason, message string)
	// Logger, when set, logs each plan.
	Logger *slog.Logger
	// Now is the clock of Plan's reuse; nil is time.Now.
	Now func() time.Time

	mu   sync.Mutex
	last string
	// plan is the last plan Blockers read without error, and when.
	plan   vmdrain.Report
	planAt time.Time
}

// PlanReuse is how old the plan of the VM check may be for the drain that
// follows it to take it rather than plan again (Plan).
const PlanReuse = 2 * time.Minute

// Plan is the plan of the gate's last check when it is younger than
// PlanReuse, else a new one: the drain that follows a check takes its plan
// on, instead of asking the cluster again (VMProgress).
func (g *VMGate) Plan(ctx context.Context) (vmdrain.Report, error) {
	now := g.now()
	g.mu.Lock()
	r, at := g.plan, g.planAt
	g.mu.Unlock()
	if !at.IsZero() && now.Sub(at) < PlanReuse {
		return r, nil
	}
	return g.Read(ctx)
}

func (g *VMGate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// VMGateWhat names the VM check in a maintenance's reason to wait.
const VMGateWhat = "VMs that cannot leave by live migration (drain.vmWithoutTarget wait)"

// Blockers implements GateChecker.
func (g *VMGate) Blockers(ctx context.Context) []reboot.Blocker {
	r, err := g.Read(ctx)
	if err == nil {
		g.mu.Lock()
		g.plan, g.planAt = r, g.now()
		g.mu.Unlock()
	}
	var notGranted *vmdrain.NotGrantedError
	if g.Logger != nil {
		g.Logger.Info("Planned the VMs' ways off the node", "served", r.Served, "vms", len(r.Plans), "cannotLeave", len(r.Held()), "err", err)
	}
	switch {
	case errors.As(err, &notGranted):
		g.warn("VMsNotRead", fmt.Sprintf("The agent may not list the VirtualMachineInstances on its node, so its drains do not plan the VMs' ways off it: %v", err))
		return nil
	case err != nil:
		return []reboot.Blocker{{Kind: reboot.BlockerVM, Name: "the VMs on this node could not be read: " + err.Error()}}
	}
	held := r.Held()
	if len(held) == 0 {
		g.warn("", "")
		return nil
	}
	names := make([]string, len(held))
	for i, p := range held {
		names[i] = fmt.Sprintf("%s (%s: %s)", p.VM.Key(), p.Way, p.Why)
	}
	if g.Mode == vmspec.Proceed {
		g.warn("VMsCannotMigrate", "Draining anyway (drain.vmWithoutTarget proceed), though these VMs cannot leave by live migration: "+strings.Join(names, "; "))
		return nil
	}
	out := make([]reboot.Blocker, len(names))
	for i, n := range names {
		out[i] = reboot.Blocker{Kind: reboot.BlockerVM, Name: n}
	}
	return out
}

func (g *VMGate) warn(reason, message string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if message == g.last {
		return
	}
	g.last = message
	if message != "" && g.Warn != nil {
		g.Warn(reason, message)
	}
}

// VMProgress follows the node's VMs for one drain (selfdrain's
// EngineOptions.VMProgress): when the drain begins it plans the VMs on the
// node (read), and each poll then says where each of those is
// (vmdrain.Tracker, with list). A cluster without VMs, or a read that
// fails, follows none: the drain goes on without.
func VMProgress(read func(ctx context.Context) (vmdrain.Report, error), list func(ctx context.Context) ([]vmdrain.VM, error),
	get func(ctx context.Context, namespace, name string) (vmdrain.VM, bool, error),
	node string, now func() time.Time, log *slog.Logger) func(ctx context.Context) func(ctx context.Context) ([]selfdrain.VMStatus, error) {
	return func(ctx context.Context) func(ctx context.Context) ([]selfdrain.VMStatus, error) {
		r, err := read(ctx)
		if err != nil {
			if log != nil {
				log.Warn("Not following the node's VMs during this drain", "err", err)
			}
			return nil
		}
		if len(r.Plans) == 0 {
			return nil
		}
		t := &vmdrain.Tracker{List: list, Get: get, Now: now, Node: node, Planned: map[string]vmdrain.VMPlan{}}
		for _, p := range r.Plans {
			t.Planned[p.VM.Key()] = p
		}
		return func(ctx context.Context) ([]selfdrain.VMStatus, error) {
			ps, err := t.Track(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]selfdrain.VMStatus, len(ps))
			for i, p := range ps {
				out[i] = selfdrain.VMStatus{Name: p.VM, Phase: p.Phase, Target: p.Target, Message: p.Message}
				if !p.Since.IsZero() {
					out[i].Since = &metav1.Time{Time: p.Since}
				}
			}
			return out, nil
		}
	}
}

// CancelVMs calls off the evacuation of the node's VMs when its maintenance
// ends (selfdrain's EngineOptions.CancelVMs), and names them: "vms/a
// (migrating to node-2), vms/b". A cluster without VMs, or an agent not
// granted their list, has nothing to call off.
func CancelVMs(cancel func(ctx context.Context) ([]vmdrain.Cancelled, error)) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		cs, err := cancel(ctx)
		var notGranted *vmdrain.NotGrantedError
		if errors.As(err, &notGranted) || apierrors.IsNotFound(err) {
			return "", nil
		}
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = c.VM
			if c.Migrating {
				names[i] += " (migrating to " + c.Target + ")"
			}
		}
		return strings.Join(names, ", "), err
	}
}
