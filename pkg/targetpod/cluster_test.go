package targetpod

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/node-agent/node-agent/pkg/kubevirtcr"
)

func TestClusterOf(t *testing.T) {
	if got := ClusterOf(nil); !reflect.DeepEqual(got, Cluster{}) {
		t.Errorf("nil: %+v", got)
	}
	s := &kubevirtcr.Settings{
		FeatureGates: []string{"HypervStrictCheck"}, NodeSelectors: map[string]string{"zone": "a"}, MemoryOvercommit: 150,
		CPUAllocationRatio: 4, UseEmulation: true, AdditionalGuestMemoryOverheadRatio: "1.2", DefaultRuntimeClass: "kata",
		SerialConsoleLogDisabled: true, NetworkBindings: map[string]resource.Quantity{"slirp": resource.MustParse("80Mi")}, ObservedVersion: "v1.8.4",
	}
	want := Cluster{
		Version: "v1.8.4", FeatureGates: []string{"HypervStrictCheck"}, NodeSelectors: map[string]string{"zone": "a"}, MemoryOvercommit: 150,
		CPUAllocationRatio: 4, UseEmulation: true, AdditionalGuestMemoryOverheadRatio: "1.2", DefaultRuntimeClass: "kata",
		SerialConsoleLogDisabled: true, NetworkBindings: map[string]resource.Quantity{"slirp": resource.MustParse("80Mi")},
	}
	got := ClusterOf(s)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	got.NodeSelectors["zone"] = "b"
	if s.NodeSelectors["zone"] != "a" {
		t.Error("ClusterOf shares the settings' map")
	}
}

func TestVersions(t *testing.T) {
	for _, tt := range []struct {
		version string
		want    release
		note    string
	}{
		{"", latest, ""}, {"v1.7.0", release{7, 0}, ""}, {"v1.8.4", release{8, 4}, ""}, {"v1.9.0-rc.1", release{9, 0}, ""},
		{"v1.6.3", release{7, 0}, "older"}, {"v1.10.0", release{9, 0}, "newer"}, {"main", latest, "not understood"},
	} {
		r := &renderer{c: Cluster{Version: tt.version}}
		if got := r.release(); got != tt.want {
			t.Errorf("%q: %+v, want %+v", tt.version, got, tt.want)
		}
		if (tt.note == "") != (len(r.notes) == 0) || (tt.note != "" && !strings.Contains(r.notes[0], tt.note)) {
			t.Errorf("%q: notes %q, want one saying %q", tt.version, r.notes, tt.note)
		}
	}
}

// TestNotes: what Render cannot render, it says.
func TestNotes(t *testing.T) {
	u := vmiObj(t, "spec.domain.cpu.model", "host-model", "spec.networks", arr(obj{"name": "sriov", "multus": obj{"networkName": "x"}}),
		"spec.domain.devices.disks", arr(obj{"name": "lun", "lun": obj{"reservation": true}}),
		"spec.volumes", arr(obj{"name": "lun", "persistentVolumeClaim": obj{"claimName": "pvc"}}),
		"spec.domain.devices.filesystems", arr(obj{"name": "share", "virtiofs": obj{}}),
		"metadata.annotations", obj{"hooks.kubevirt.io/hookSidecars": "[]"})
	_, notes := render(t, u, Source{Node: node("host-model-cpu.node.kubevirt.io/Haswell", "true")}, Cluster{})
	for _, want := range []string{"source pod not known", "network sriov", "persistent reservation", "volumes lun", "virtiofs filesystem share", "hook sidecars"} {
		found := false
		for _, n := range notes {
			found = found || strings.Contains(n, want)
		}
		if !found {
			t.Errorf("no note saying %q in %q", want, notes)
		}
	}
}
