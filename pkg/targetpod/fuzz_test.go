package targetpod

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// A VMI is a tenant's object: whatever its spec holds, Render returns a pod
// or an error, and never panics. The seeds are VMIs of each kind the tests
// render, as JSON.
func FuzzRender(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"name":"a","namespace":"n","uid":"u"},"spec":{"domain":{"cpu":{"model":"host-model","cores":2},"resources":{"requests":{"memory":"1Gi"}}}},"status":{"nodeName":"src"}}`,
		`{"metadata":{"name":"a"},"spec":{"domain":{"cpu":{"model":"Skylake-Server","dedicatedCpuPlacement":true,"isolateEmulatorThread":true,"features":[{"name":"invtsc","policy":"require"},{"name":"x","policy":"forbid"}]},"memory":{"guest":"2Gi","hugepages":{"pageSize":"2Mi"}},"features":{"hyperv":{"reenlightenment":{"enabled":true}}},"devices":{"gpus":[{"deviceName":"nvidia.com/A"}],"interfaces":[{"name":"d","masquerade":{}}]},"launchSecurity":{"sev":{"policy":{"encryptedState":true}}}}},"status":{"topologyHints":{"tscFrequency":2400000000},"machine":{"type":"q35"}}}`,
		`{"spec":{"domain":{"cpu":{"sockets":-1,"cores":0,"threads":99999999999},"resources":{"requests":{"memory":"-5Gi","cpu":"1e9"}},"memory":{"guest":"0"}},"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[]}}}}}`,
		`{"spec":{"domain":7}}`,
		`{"spec":null,"status":[]}`,
	} {
		f.Add([]byte(s))
	}
	src := Source{Node: node(kubevirtlabels.HostModelCPULabelPrefix+"EPYC", "true", kubevirtlabels.HostModelRequiredFeaturesLabelPrefix+"ibpb", "true")}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil || m == nil {
			return
		}
		for _, c := range []Cluster{{}, {Version: "v1.7.0", MemoryOvercommit: 150, CPUAllocationRatio: 3, AdditionalGuestMemoryOverheadRatio: "2.5"}} {
			pod, _, err := Render(&unstructured.Unstructured{Object: m}, src, c)
			if err == nil && pod == nil {
				t.Fatal("no pod and no error")
			}
		}
	})
}
