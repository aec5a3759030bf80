package hostcpu

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The testdata files were captured on this project's test host (AMD EPYC
// under Firecracker, libvirt 9.0, QEMU 7.2) with
//
//	virsh -c 'qemu:///embed?root=DIR' domcapabilities --virttype qemu|kvm
//	virsh -c ... capabilities
//	virsh -c ... hypervisor-cpu-baseline --features --virttype T FILE
func TestParseDomainCapabilitiesCaptured(t *testing.T) {
	tests := []struct {
		file        string
		virtType    string
		hostModel   string
		required    int
		disabled    int
		models      int
		usable      []string
		notUsable   []string
		wantInclude []string
	}{
		{
			file: "domcapabilities-qemu.xml", virtType: "qemu", hostModel: "EPYC",
			required: 18, disabled: 10, models: 53,
			usable:      []string{"486", "Conroe", "Nehalem", "Opteron_G1", "Opteron_G2", "Penryn", "Westmere", "athlon", "core2duo", "coreduo", "kvm32", "kvm64", "n270", "pentium", "pentium2", "pentium3", "qemu32", "qemu64"},
			notUsable:   []string{"Haswell", "EPYC", "Skylake-Server"},
			wantInclude: []string{"la57", "svme-addr-chk"},
		},
		{
			file: "domcapabilities-kvm.xml", virtType: "kvm", hostModel: "EPYC-Milan",
			required: 11, disabled: 46, models: 53,
			usable:      []string{"486", "pentium", "pentium2", "pentium3"},
			notUsable:   []string{"Penryn", "EPYC-Milan"},
			wantInclude: []string{"invtsc", "x2apic"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			dc, err := ParseDomainCapabilities(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if dc.Arch != "x86_64" || dc.VirtType != tt.virtType {
				t.Errorf("arch, virttype = %q, %q; want x86_64, %q", dc.Arch, dc.VirtType, tt.virtType)
			}
			if dc.HostModel == nil || dc.HostModel.Name != tt.hostModel || dc.HostModel.Vendor != "AMD" {
				t.Fatalf("host model = %+v; want %s by AMD", dc.HostModel, tt.hostModel)
			}
			if len(dc.HostModel.Required) != tt.required || len(dc.HostModel.Disabled) != tt.disabled {
				t.Errorf("host model has %d required, %d disabled; want %d, %d", len(dc.HostModel.Required), len(dc.HostModel.Disabled), tt.required, tt.disabled)
			}
			for _, f := range tt.wantInclude {
				if !slices.Contains(dc.HostModel.Required, f) {
					t.Errorf("required features lack %s: %v", f, dc.HostModel.Required)
				}
			}
			if len(dc.Models) != tt.models {
				t.Errorf("%d models; want %d", len(dc.Models), tt.models)
			}
			h := &HostCPU{Models: dc.Models}
			if got := h.UsableModels(); !reflect.DeepEqual(got, tt.usable) {
				t.Errorf("usable = %v; want %v", got, tt.usable)
			}
			for _, m := range tt.notUsable {
				if slices.Contains(h.UsableModels(), m) || !slices.Contains(h.AllModels(), m) {
					t.Errorf("%s: want listed and not usable", m)
				}
			}
		})
	}
}

func TestParseDomainCapabilities(t *testing.T) {
	tests := []struct {
		name    string
		xml     string
		wantErr string
		check   func(t *testing.T, dc *DomainCapabilities)
	}{
		{name: "not XML", xml: "virsh: error", wantErr: "parsing domain capabilities XML"},
		{name: "wrong root", xml: "<capabilities/>", wantErr: "expected element type <domainCapabilities>"},
		{name: "two documents", xml: "<domainCapabilities/><domainCapabilities/>", wantErr: "after the document's root"},
		{name: "text after root", xml: "<domainCapabilities/>junk", wantErr: "unexpected text"},
		{
			name:    "host-model with empty model",
			xml:     `<domainCapabilities><cpu><mode name='host-model' supported='yes'><model> </model></mode></cpu></domainCapabilities>`,
			wantErr: "empty <model>",
		},
		{
			name: "no cpu element",
			xml:  `<domainCapabilities><domain>qemu</domain></domainCapabilities>`,
			check: func(t *testing.T, dc *DomainCapabilities) {
				if dc.HostModel != nil || dc.Models != nil || dc.VirtType != "qemu" {
					t.Errorf("got %+v", dc)
				}
			},
		},
		{
			name: "unsupported modes are ignored",
			xml: `<domainCapabilities><cpu>
				<mode name='host-model' supported='no'><model>EPYC</model></mode>
				<mode name='custom' supported='no'><model usable='yes'>Penryn</model></mode>
			</cpu></domainCapabilities>`,
			check: func(t *testing.T, dc *DomainCapabilities) {
				if dc.HostModel != nil || dc.Models != nil {
					t.Errorf("got %+v", dc)
				}
			},
		},
		{
			name: "names trimmed, duplicates and empty dropped, feature policies split",
			xml: `<domainCapabilities><cpu>
				<mode name='host-model' supported='yes'><model fallback='forbid'>
				  Haswell </model><vendor> Intel </vendor>
				  <feature policy='require' name='b'/><feature policy='require' name='a'/>
				  <feature policy='require' name='a'/><feature policy='disable' name='c'/>
				  <feature policy='optional' name='d'/></mode>
				<mode name='custom' supported='yes'>
				  <model usable='yes' vendor='Intel' deprecated='yes'>Penryn</model>
				  <model usable='no' vendor='Intel'> Penryn </model>
				  <model usable='no'></model>
				  <model usable='no' vendor='AMD'>EPYC</model></mode>
			</cpu></domainCapabilities>`,
			check: func(t *testing.T, dc *DomainCapabilities) {
				want := &HostModel{Name: "Haswell", Vendor: "Intel", Required: []string{"a", "b"}, Disabled: []string{"c"}, Other: []CPUFeature{{Name: "d", Policy: "optional"}}}
				if !reflect.DeepEqual(dc.HostModel, want) {
					t.Errorf("host model = %+v; want %+v", dc.HostModel, want)
				}
				wantModels := []Model{{Name: "Penryn", Usable: true, Usability: "yes", Vendor: "Intel", Deprecated: true}, {Name: "EPYC", Usability: "no", Vendor: "AMD"}}
				if !reflect.DeepEqual(dc.Models, wantModels) {
					t.Errorf("models = %+v; want %+v", dc.Models, wantModels)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dc, err := ParseDomainCapabilities([]byte(tt.xml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, dc)
		})
	}
}

func TestParseCapabilities(t *testing.T) {
	caps, err := ParseCapabilities(readTestdata(t, "capabilities.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if caps.Arch != "x86_64" {
		t.Errorf("arch = %q", caps.Arch)
	}
	if want := (&TSC{Frequency: 2445426000, Scalable: false}); !reflect.DeepEqual(caps.TSC, want) {
		t.Errorf("tsc = %+v; want %+v", caps.TSC, want)
	}
	// The i686 and x86_64 guests of qemu-system-x86_64 list the same 60
	// machines.
	mt := caps.MachineTypes()
	if len(mt) != 60 || !slices.Contains(mt, "q35") || !slices.Contains(mt, "pc-q35-7.2") || !slices.IsSorted(mt) {
		t.Errorf("machine types = %d %v", len(mt), mt)
	}

	tests := []struct {
		name    string
		xml     string
		wantErr string
		check   func(t *testing.T, c *Capabilities)
	}{
		{name: "wrong root", xml: "<domainCapabilities/>", wantErr: "expected element type <capabilities>"},
		{name: "bad frequency", xml: `<capabilities><host><cpu><counter name='tsc' frequency='fast'/></cpu></host></capabilities>`, wantErr: `frequency "fast"`},
		{
			name: "no tsc counter",
			xml:  `<capabilities><host><cpu><arch>x86_64</arch><counter name='hpet' frequency='1'/></cpu></host></capabilities>`,
			check: func(t *testing.T, c *Capabilities) {
				if c.TSC != nil {
					t.Errorf("tsc = %+v; want nil", c.TSC)
				}
			},
		},
		{
			name: "scalable tsc without frequency",
			xml:  `<capabilities><host><cpu><counter name='tsc' scaling='yes'/></cpu></host></capabilities>`,
			check: func(t *testing.T, c *Capabilities) {
				if !reflect.DeepEqual(c.TSC, &TSC{Scalable: true}) {
					t.Errorf("tsc = %+v", c.TSC)
				}
			},
		},
		{
			// KubeVirt labels the <arch> machines of every guest, whatever
			// its arch or os type, and no <domain> machine
			// (cmd/virt-handler getMachines, kubevirt d923fdb).
			name: "machines of every guest, under arch only",
			xml: `<capabilities><host/>
				<guest><os_type>hvm</os_type><arch name='x86_64'><machine>pc</machine><machine canonical='pc-q35-10.0'>q35</machine>
				  <domain type='qemu'/><domain type='kvm'><machine>kvm-only</machine></domain></arch></guest>
				<guest><os_type>hvm</os_type><arch name='aarch64'><machine>virt</machine><machine>virt-10.0</machine><domain type='qemu'/></arch></guest>
				<guest><os_type>xen</os_type><arch name='x86_64'><machine>xenpv</machine></arch></guest>
			</capabilities>`,
			check: func(t *testing.T, c *Capabilities) {
				want := []string{"pc", "q35", "virt", "virt-10.0", "xenpv"}
				if got := c.MachineTypes(); !reflect.DeepEqual(got, want) {
					t.Errorf("machines = %v; want %v", got, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCapabilities([]byte(tt.xml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseCPU(t *testing.T) {
	tests := []struct {
		file     string
		model    string
		require  int
		disable  int
		disabled []string // checked when set
		contains string
	}{
		{file: "baseline-Penryn-qemu.xml", model: "Penryn", require: 29},
		{file: "baseline-Haswell-qemu.xml", model: "Haswell", require: 44, disable: 6, disabled: []string{"hle", "invpcid", "pcid", "rtm", "tsc-deadline", "x2apic"}},
		// The host model's disabled features stay disabled in the expansion.
		{file: "baseline-host-model-qemu.xml", model: "EPYC", require: 75, disable: 10, contains: "svme-addr-chk"},
		{file: "baseline-host-model-kvm.xml", model: "EPYC-Milan", require: 50, disable: 46, contains: "invtsc"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := ParseCPU(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.Model != tt.model || c.Mode != "custom" || c.Match != "exact" {
				t.Errorf("cpu = %s mode %s match %s", c.Model, c.Mode, c.Match)
			}
			req := c.FeaturesWithPolicy("require")
			if len(req) != tt.require {
				t.Errorf("%d required features; want %d", len(req), tt.require)
			}
			dis := c.FeaturesWithPolicy("disable")
			if len(dis) != tt.disable || (tt.disabled != nil && !reflect.DeepEqual(dis, tt.disabled)) {
				t.Errorf("disabled = %v; want %d of them %v", dis, tt.disable, tt.disabled)
			}
			if tt.contains != "" && !slices.Contains(req, tt.contains) {
				t.Errorf("required features lack %s", tt.contains)
			}
			if got, want := len(c.FeatureNames()), tt.require+tt.disable; got != want {
				t.Errorf("%d feature names; want %d", got, want)
			}
			assertCPURoundTrip(t, c)
		})
	}
	if _, err := ParseCPU([]byte("<domainCapabilities/>")); err == nil {
		t.Error("a domcapabilities document parsed as a CPU")
	}
	c, err := ParseCPU([]byte(`<cpu><model>X</model><feature name='a'/><feature name=' '/></cpu>`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.FeaturesWithPolicy("require"); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("a feature without policy must count as require; got %v", got)
	}
}

// assertCPURoundTrip checks that rendering c and parsing it again gives c.
func assertCPURoundTrip(t testing.TB, c *CPU) {
	t.Helper()
	s, err := c.XML()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCPU([]byte(s))
	if err != nil {
		t.Fatalf("parsing rendered %q: %v", s, err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip changed the CPU:\n got %+v\nwant %+v\n xml %s", back, c, s)
	}
}

func TestHostModelCPU(t *testing.T) {
	dc, err := ParseDomainCapabilities(readTestdata(t, "domcapabilities-qemu.xml"))
	if err != nil {
		t.Fatal(err)
	}
	c := hostModelCPU(dc.HostModel)
	s, err := c.XML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<cpu mode="custom" match="exact">`, `<model fallback="forbid">EPYC</model>`, `<vendor>AMD</vendor>`, `<feature name="la57" policy="require">`, `<feature name="vme" policy="disable">`} {
		if !strings.Contains(s, want) {
			t.Errorf("host-model CPU XML lacks %s:\n%s", want, s)
		}
	}
}
