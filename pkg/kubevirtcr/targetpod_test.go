package kubevirtcr

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestTargetPodFields(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	cr := kv("kubevirt", "kubevirt", t0, "", map[string]any{
		"additionalGuestMemoryOverheadRatio": "1.5",
		"defaultRuntimeClass":                "kata",
		"virtualMachineOptions":              map[string]any{"disableSerialConsoleLog": map[string]any{}},
		"developerConfiguration": map[string]any{
			"nodeSelectors":      map[string]any{"zone": "a"},
			"memoryOvercommit":   int64(150),
			"cpuAllocationRatio": int64(4),
			"useEmulation":       true,
		},
		"network": map[string]any{"binding": map[string]any{
			"passt":   map[string]any{"computeResourceOverhead": map[string]any{"requests": map[string]any{"memory": "500Mi"}}},
			"managed": map[string]any{"sidecarImage": "x"},
		}},
	})
	cr.Object["status"].(map[string]any)["observedKubeVirtVersion"] = "v1.8.4"
	st := Choose([]*unstructured.Unstructured{cr})
	if st.Note != "" {
		t.Fatalf("note %q", st.Note)
	}
	want := &Settings{
		CR: "kubevirt/kubevirt", NodeSelectors: map[string]string{"zone": "a"}, MemoryOvercommit: 150, CPUAllocationRatio: 4,
		UseEmulation: true, AdditionalGuestMemoryOverheadRatio: "1.5", DefaultRuntimeClass: "kata", SerialConsoleLogDisabled: true,
		NetworkBindings: map[string]resource.Quantity{"passt": resource.MustParse("500Mi")}, ObservedVersion: "v1.8.4",
	}
	if !reflect.DeepEqual(st.Settings, want) {
		t.Errorf("got %+v\nwant %+v", st.Settings, want)
	}
	if !st.Equal(State{Settings: want}) {
		t.Error("Equal: the same settings differ")
	}
	// Equal sees each new field, and compares quantities by value.
	same := *want
	same.NetworkBindings = map[string]resource.Quantity{"passt": resource.MustParse("0.48828125Gi")}
	if !st.Equal(State{Settings: &same}) {
		t.Error("Equal: 500Mi and 0.48828125Gi differ")
	}
	for name, change := range map[string]func(s *Settings){
		"node selectors":   func(s *Settings) { s.NodeSelectors = map[string]string{"zone": "b"} },
		"overcommit":       func(s *Settings) { s.MemoryOvercommit = 100 },
		"ratio":            func(s *Settings) { s.CPUAllocationRatio = 10 },
		"emulation":        func(s *Settings) { s.UseEmulation = false },
		"overhead ratio":   func(s *Settings) { s.AdditionalGuestMemoryOverheadRatio = "" },
		"runtime class":    func(s *Settings) { s.DefaultRuntimeClass = "" },
		"serial console":   func(s *Settings) { s.SerialConsoleLogDisabled = false },
		"bindings":         func(s *Settings) { s.NetworkBindings = nil },
		"observed version": func(s *Settings) { s.ObservedVersion = "v1.9.0" },
	} {
		o := *want
		change(&o)
		if st.Equal(State{Settings: &o}) {
			t.Errorf("Equal misses a change of %s", name)
		}
	}
	bad := kv("kubevirt", "kubevirt", t0, "", map[string]any{"developerConfiguration": map[string]any{"memoryOvercommit": "lots"}})
	if st := Choose([]*unstructured.Unstructured{bad}); st.Note == "" || st.Settings.MemoryOvercommit != 0 {
		t.Errorf("a wrong type: %+v", st)
	}
}
