package baseline

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, models, features []string) NodeCPU {
	return NodeCPU{Name: name, Models: models, Features: features}
}

func TestGeneration(t *testing.T) {
	order := []string{"Penryn", "Haswell-noTSX", "Haswell", "Haswell-IBRS", "Skylake-Client-noTSX-IBRS", "Skylake-Client", "Skylake-Client-IBRS", "Cascadelake-Server-v2", "Cascadelake-Server-v4", "Icelake-Server"}
	for i := 1; i < len(order); i++ {
		if a, b := Generation(order[i-1]), Generation(order[i]); a >= b {
			t.Errorf("Generation(%s)=%d not below Generation(%s)=%d", order[i-1], a, order[i], b)
		}
	}
	for _, m := range []string{"EPYC-Rome", "EPYC-IBPB", "Opteron_G3"} {
		if Generation(m) == 0 {
			t.Errorf("%s has no generation", m)
		}
	}
	if Generation("EPYC-IBPB") <= Generation("EPYC") || Generation("EPYC-Rome") <= Generation("EPYC-IBPB") {
		t.Error("EPYC variants out of order")
	}
	for _, m := range []string{"z14.2", "cortex-a57", "qemu64", ""} {
		if g := Generation(m); g != 0 {
			t.Errorf("Generation(%q) = %d; want 0", m, g)
		}
	}
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name           string
		nodes          []NodeCPU
		wantModel      string
		wantCommon     []string
		wantCandidates []Candidate
		wantShared     []string
		wantUnlabelled []string
	}{
		{
			name: "one old node holds the pool back",
			nodes: []NodeCPU{
				node("b-new", []string{"Haswell", "Icelake-Server", "Penryn", "Skylake-Client"}, []string{"avx512f", "avx2", "sse4.2"}),
				node("a-new", []string{"Haswell", "Icelake-Server", "Penryn", "Skylake-Client"}, []string{"avx512f", "avx2", "sse4.2"}),
				node("c-old", []string{"Haswell", "Penryn"}, []string{"avx2", "sse4.2"}),
			},
			wantModel:  "Haswell",
			wantCommon: []string{"Haswell", "Penryn"},
			wantCandidates: []Candidate{
				{Model: "Icelake-Server", Generation: Generation("Icelake-Server"), Nodes: 2, HeldBackBy: []string{"c-old"}},
				{Model: "Skylake-Client", Generation: Generation("Skylake-Client"), Nodes: 2, HeldBackBy: []string{"c-old"}},
			},
			wantShared:     []string{"avx2", "sse4.2"},
			wantUnlabelled: []string{},
		},
		{
			name: "an unlabelled node holds back everything",
			nodes: []NodeCPU{
				node("a", []string{"Haswell"}, []string{"avx2"}),
				node("b", []string{}, []string{}),
			},
			wantCommon: []string{},
			wantCandidates: []Candidate{
				{Model: "Haswell", Generation: Generation("Haswell"), Nodes: 1, HeldBackBy: []string{"b"}},
			},
			wantShared:     []string{},
			wantUnlabelled: []string{"b"},
		},
		{
			name: "common models outside the built-in order",
			nodes: []NodeCPU{
				node("a", []string{"z14", "z14.2"}, nil),
				node("b", []string{"z14"}, nil),
			},
			wantCommon: []string{"z14"},
			wantCandidates: []Candidate{
				{Model: "z14", Nodes: 2, HeldBackBy: []string{}},
				{Model: "z14.2", Nodes: 1, HeldBackBy: []string{"b"}},
			},
			wantShared:     []string{},
			wantUnlabelled: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compute(tt.nodes)
			if r.Model != tt.wantModel {
				t.Errorf("model %q; want %q", r.Model, tt.wantModel)
			}
			if !reflect.DeepEqual(r.Common, tt.wantCommon) {
				t.Errorf("common %v; want %v", r.Common, tt.wantCommon)
			}
			if !reflect.DeepEqual(r.Candidates, tt.wantCandidates) {
				t.Errorf("candidates %+v\nwant %+v", r.Candidates, tt.wantCandidates)
			}
			if r.SharedFeatures == nil {
				r.SharedFeatures = []string{}
			}
			if !reflect.DeepEqual(r.SharedFeatures, tt.wantShared) {
				t.Errorf("shared %v; want %v", r.SharedFeatures, tt.wantShared)
			}
			if !reflect.DeepEqual(r.Unlabelled, tt.wantUnlabelled) {
				t.Errorf("unlabelled %v; want %v", r.Unlabelled, tt.wantUnlabelled)
			}
		})
	}
	if r := Compute(nil); r.Model != "" || len(r.Notes) == 0 {
		t.Errorf("no nodes: %+v", r)
	}
	mixed := Compute([]NodeCPU{{Name: "a", Models: []string{"Penryn"}, Vendor: "Intel"}, {Name: "b", Models: []string{"Penryn"}, Vendor: "AMD"}})
	if mixed.Model != "Penryn" || !strings.Contains(strings.Join(mixed.Notes, " "), "2 vendors (AMD, Intel)") {
		t.Errorf("two vendors: model %q, notes %v", mixed.Model, mixed.Notes)
	}
}

func TestFromNode(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{
		"cpu-model.node.kubevirt.io/Haswell": "true",
		"cpu-model.node.kubevirt.io/Penryn":  "true",
		"cpu-model.node.kubevirt.io/Off":     "false",
		// Since KubeVirt v1.7 (and node-agent following it), the
		// migration family also names models this host cannot run
		// (usable='no'); the baseline must never count them.
		"cpu-model-migration.node.kubevirt.io/EPYC":           "true",
		"cpu-model-migration.node.kubevirt.io/Skylake-Server": "true",
		"cpu-model-migration.node.kubevirt.io/Haswell":        "true",
		"cpu-feature.node.kubevirt.io/avx2":                   "true",
		"host-model-cpu.node.kubevirt.io/Haswell-IBRS":        "true",
		"cpu-vendor.node.kubevirt.io/Intel":                   "true",
		"kubernetes.io/hostname":                              "n",
	}}}
	want := NodeCPU{Name: "n", Models: []string{"Haswell", "Penryn"}, Features: []string{"avx2"}, HostModel: "Haswell-IBRS", Vendor: "Intel"}
	if got := FromNode(n); !reflect.DeepEqual(got, want) {
		t.Errorf("FromNode = %+v; want %+v", got, want)
	}
}
