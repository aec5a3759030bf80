package labeller

import (
	"slices"
	"time"

	"github.com/node-agent/node-agent/pkg/kubevirtcr"
)

// KubeVirtRecheckInterval is how often an agent asks discovery again
// whether the cluster serves kubevirts.kubevirt.io while it does not (or
// refuses the agent its CRs), so that a KubeVirt installed later is followed
// without a restart. An idle agent otherwise sends only its watch renewals,
// about one request every ten minutes (docs/scale.md); a discovery request
// every 30 minutes adds a third of that where KubeVirt is not installed. Where
// the resource is served, the CR is watched instead and nothing is polled.
const KubeVirtRecheckInterval = 30 * time.Minute

// KubeVirtStateOf is what the labels follow of the KubeVirt CR's state as
// pkg/kubevirtcr reads it: its obsolete CPU models and minimum CPU model,
// and whether its feature gates turn on cross-architecture
// virtualization (CrossArchitectureGate), which changes the host-model
// labels KubeVirt expects.
func KubeVirtStateOf(s kubevirtcr.State) KubeVirtState {
	out := KubeVirtState{Note: s.Note}
	if cr := s.Settings; cr != nil {
		out.Settings = &KubeVirtSettings{
			CR: cr.CR, ObsoleteCPUModels: cr.ObsoleteCPUModels, MinCPUModel: cr.MinCPUModel,
			CrossArchitectureVirtualization: slices.Contains(cr.FeatureGates, CrossArchitectureGate),
		}
	}
	return out
}
