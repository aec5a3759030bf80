package gates

// BlockerKind is what holds a reboot or a maintenance.
type BlockerKind string

const (
	BlockerPod   BlockerKind = "pod"
	BlockerAlert BlockerKind = "alert"
	BlockerGate  BlockerKind = "gate"
	// BlockerVM: a KubeVirt VM on the node cannot leave it by live
	// migration (drain.vmWithoutTarget wait); its name says which and why.
	BlockerVM BlockerKind = "vm"
)

// Blocker is one thing that holds a reboot or a maintenance.
type Blocker struct {
	Kind BlockerKind
	// Name is namespace/name for a pod, the alertname for an alert, or
	// what failed ("prometheus unreachable: ...").
	Name string
	// BeforeReboot marks a gate's blocker that holds the reboot after the
	// drain too (reboot.gates' beforeReboot): the drained node waits for
	// it, up to Input.BeforeRebootBound.
	BeforeReboot bool
}
