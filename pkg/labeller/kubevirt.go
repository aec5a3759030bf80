package labeller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kubevirtcr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
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

// KubeVirtReadTimeout bounds ReadKubeVirt: discovery and one list.
const KubeVirtReadTimeout = 30 * time.Second

// ReadKubeVirt reads the KubeVirt CR once from the cluster rc connects to,
// within KubeVirtReadTimeout (`node-agent labels`; the agent watches it
// instead).
func ReadKubeVirt(ctx context.Context, rc *rest.Config) (KubeVirtState, error) {
	client, err := kube.New(rc)
	if err != nil {
		return KubeVirtState{}, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return KubeVirtState{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, KubeVirtReadTimeout)
	defer cancel()
	st, err := kubevirtcr.Read(ctx, client.Discovery(), dyn)
	if err != nil {
		return KubeVirtState{}, fmt.Errorf("reading the KubeVirt CR from %s: %w", rc.Host, err)
	}
	return KubeVirtStateOf(st), nil
}
