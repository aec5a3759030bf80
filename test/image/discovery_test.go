//go:build linux

package image

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
	"github.com/node-agent/node-agent/pkg/labeller"
	"github.com/node-agent/node-agent/test/testenv"
)

// TestImageDiscovery is issue 31's acceptance: in the image's root
// filesystem, `node-agent labels` names the host model that the image's own
// `virsh domcapabilities` names, and its cpu-model-migration family holds
// every known, non-obsolete model of that domcapabilities (cpu-model the
// usable ones), under KVM when the host has /dev/kvm and under QEMU's TCG
// without it.
func TestImageDiscovery(t *testing.T) {
	img := testenv.RequireImageRootfs(t)
	t.Logf("image %s %s: base %s, top layer %s", img.Name, img.Digest, img.BaseDir, img.LayerDir)
	for _, tc := range []struct {
		name     string
		kvm      bool
		virtType string // what node-agent's --virt-type auto must pick
	}{
		{name: "kvm", kvm: true, virtType: "kvm"},
		{name: "without-kvm", virtType: "qemu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.kvm {
				if _, err := os.Stat("/dev/kvm"); err != nil {
					t.Skipf("this host has no /dev/kvm (%v); machines of this kind differ, and the case without it runs", err)
				}
			}
			r := discoverInImage(t, img, tc.kvm, tc.virtType)
			r.log(t)
			r.check(t)
		})
	}
}

// discovery is what one container, with or without /dev/kvm, reported.
type discovery struct {
	virtType string
	versions string // `virsh version`
	dc       testenv.DomainCapabilities
	labels   map[string]string
	sources  string // node-agent's stderr: the sources it used, what it left out
}

// discoverInImage runs virsh and then node-agent in a fresh container of
// the image, each with its own embedded libvirt (qemu:///embed, as the
// DaemonSet runs it), so that neither reads the other's QEMU capability
// cache. The container gets /dev/kvm only when kvm is set.
func discoverInImage(t *testing.T, img testenv.ImageSummary, kvm bool, virtType string) discovery {
	t.Helper()
	c := testenv.NewImageContainer(t, img, kvm)
	run := func(args ...string) []byte {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := c.Run(t.Context(), args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("in the image: %s: %v\n%s", strings.Join(args, " "), err, errOut.Bytes())
		}
		return out.Bytes()
	}

	const virshURI = "qemu:///embed?root=/var/lib/virsh"
	d := discovery{virtType: virtType}
	out := run("virsh", "-c", virshURI, "version")
	d.versions = strings.TrimSpace(string(out))
	out = run("virsh", "-q", "-c", virshURI, "domcapabilities", "--virttype", virtType)
	var err error
	if d.dc, err = testenv.ParseDomainCapabilities(out); err != nil {
		t.Fatal(err)
	}
	// The defaults, as the DaemonSet runs it: libvirt URI auto (no
	// qemu:///system in the container, so the embedded driver under the
	// state directory) and virt type auto (kvm exactly when /dev/kvm exists).
	if d.labels, d.sources, err = testenv.ImageLabels(t.Context(), c, "--state-dir", "/var/lib/node-agent"); err != nil {
		t.Fatal(err)
	}
	return d
}

// kubevirtObsolete is KubeVirt's rule for its default obsolete list: a model
// is obsolete when it is on the list, by exact name. node-agent's own
// Policy.IsObsolete also counts every -vN alias of a listed model; should an
// image's QEMU name one that KubeVirt does not list (say kvm64-v2), the
// comparison below names it instead of agreeing by construction.
func kubevirtObsolete(model string) bool {
	return slices.Contains(labeller.DefaultObsoleteCPUModels(), model)
}

var virtTypeRE = regexp.MustCompile(`virttype (\w+)`)

func (d discovery) check(t *testing.T) {
	t.Helper()
	if m := virtTypeRE.FindStringSubmatch(d.sources); m == nil || m[1] != d.virtType {
		t.Errorf("node-agent labels used virt type %v, want %s; its stderr:\n%s", m, d.virtType, d.sources)
	}
	if d.dc.HostModel == "" {
		t.Errorf("virsh domcapabilities --virttype %s names no host model", d.virtType)
	}
	if got := testenv.LabelFamily(d.labels, kubevirtlabels.HostModelCPULabelPrefix); !slices.Equal(got, []string{d.dc.HostModel}) {
		t.Errorf("host-model-cpu: %v; the image's virsh names %q for mode host-model", got, d.dc.HostModel)
	}
	known, usable := d.dc.ModelFamilies(kubevirtObsolete)
	for _, f := range []struct {
		prefix string
		want   []string
		what   string
	}{
		{kubevirtlabels.CPUModelMigrationLabelPrefix, known, "every known, non-obsolete model"},
		{kubevirtlabels.CPUModelLabelPrefix, usable, "every usable, non-obsolete model"},
	} {
		got := testenv.LabelFamily(d.labels, f.prefix)
		if missing, extra := difference(f.want, got), difference(got, f.want); len(missing)+len(extra) > 0 {
			t.Errorf("%s*: want %s of the image's virsh domcapabilities --virttype %s (%d); missing %v, not in virsh %v",
				f.prefix, f.what, d.virtType, len(f.want), missing, extra)
		}
	}
	if d.virtType == "qemu" {
		if got := testenv.LabelFamily(d.labels, kubevirtlabels.HyperVLabelPrefix); len(got) > 0 {
			t.Errorf("without /dev/kvm: hyperv labels %v", got)
		}
	}
}

// difference returns the elements of a that b lacks.
func difference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// log records the measured facts: the image's libvirt and QEMU, the models
// its domcapabilities lists, the host model, and the labels per family.
func (d discovery) log(t *testing.T) {
	t.Helper()
	usable := 0
	for _, m := range d.dc.Models {
		if m.Usable == "yes" {
			usable++
		}
	}
	families := map[string]int{}
	for k := range d.labels {
		prefix, _, _ := strings.Cut(k, "/")
		families[prefix]++
	}
	var counts []string
	for _, f := range slices.Sorted(maps.Keys(families)) {
		counts = append(counts, fmt.Sprintf("%s %d", f, families[f]))
	}
	t.Logf("virsh version in the image:\n%s", d.versions)
	t.Logf("virsh domcapabilities --virttype %s: host model %s; %d custom models, %d usable", d.virtType, d.dc.HostModel, len(d.dc.Models), usable)
	t.Logf("node-agent labels (virt type %s): %d labels: %s", d.virtType, len(d.labels), strings.Join(counts, ", "))
	t.Logf("node-agent labels stderr:\n%s", d.sources)
}
