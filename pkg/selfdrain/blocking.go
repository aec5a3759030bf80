package selfdrain

// maxBlockersShown bounds the blockers a running drain's record names: the
// record is an annotation on the Node, written at every progress step, and
// every watcher of Nodes receives it. PendingPods names every pod left.
const maxBlockersShown = 16

// currentBlockers are what holds the drain now, for its record while it
// runs: the pods whose last eviction was refused (by a PodDisruptionBudget,
// which is named, or by a webhook) or failed, as blockers sorts them, at
// most maxBlockersShown, and the WaitCompleted and opted-out pods. A pod
// whose eviction is not answered yet, being deleted, or in a later order
// group (lastError counts those) is not one.
func (r *drainRun) currentBlockers() []Blocker {
	var out []Blocker
	for _, b := range r.blockers() {
		switch b.Reason {
		case BlockerPodDisruptionBudget, BlockerEvictionRefused, BlockerEvictionFailed, BlockerWaitCompleted, BlockerDoNotDrain:
			if len(out) < maxBlockersShown {
				out = append(out, b)
			}
		}
	}
	return out
}
