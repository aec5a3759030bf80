package hostcpu

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The XML parsers below read only the elements discovery needs and ignore the
// rest, so a newer libvirt that adds elements still parses. The formats are
// documented at https://libvirt.org/formatdomaincaps.html,
// https://libvirt.org/formatcaps.html and https://libvirt.org/formatdomain.html#cpu-model-and-topology.

// DomainCapabilities is the CPU part of `virsh domcapabilities`.
type DomainCapabilities struct {
	// Arch is the guest architecture, such as x86_64.
	Arch string
	// VirtType is the domain type the capabilities are for (kvm, qemu).
	VirtType string
	// Machine is the machine type the capabilities are for.
	Machine string
	// HostModel is nil when host-model mode is absent or unsupported.
	HostModel *HostModel
	// Models are the custom-mode models, in libvirt's order, without
	// duplicates.
	Models []Model
	// Security is what the <features> element says about confidential
	// guests; nil when the document has no <features> element.
	Security *LaunchSecurity
}

type domainCapsXML struct {
	XMLName xml.Name `xml:"domainCapabilities"`
	Domain  string   `xml:"domain"`
	Machine string   `xml:"machine"`
	Arch    string   `xml:"arch"`
	Modes   []struct {
		Name      string `xml:"name,attr"`
		Supported string `xml:"supported,attr"`
		Models    []struct {
			Name       string `xml:",chardata"`
			Usable     string `xml:"usable,attr"`
			Vendor     string `xml:"vendor,attr"`
			Deprecated string `xml:"deprecated,attr"`
		} `xml:"model"`
		Vendor   string       `xml:"vendor"`
		Features []featureXML `xml:"feature"`
	} `xml:"cpu>mode"`
	Features *featuresXML `xml:"features"`
}

// featuresXML is the <features> element of the domain capabilities: what the
// hypervisor offers guests beyond the CPU. Only the confidential-guest parts
// are read (https://libvirt.org/formatdomaincaps.html#features).
type featuresXML struct {
	SEV *struct {
		Supported   string `xml:"supported,attr"`
		MaxESGuests string `xml:"maxESGuests"`
	} `xml:"sev"`
	LaunchSecurity *struct {
		Supported string `xml:"supported,attr"`
		Enums     []struct {
			Name   string   `xml:"name,attr"`
			Values []string `xml:"value"`
		} `xml:"enum"`
	} `xml:"launchSecurity"`
	TDX    *supportedXML `xml:"tdx"`
	S390PV *supportedXML `xml:"s390-pv"`
}

type supportedXML struct {
	Supported string `xml:"supported,attr"`
}

// security reads the confidential-guest support the way KubeVirt's node
// labeller does (pkg/virt-handler/node-labeller/cpu_plugin.go): SEV-ES needs
// SEV and a positive maxESGuests; SEV-SNP needs SEV-ES and "sev-snp" among
// launchSecurity's sectype values; TDX and s390 protected virtualization
// (IBM Secure Execution) need only their own supported='yes'.
func (f *featuresXML) security() *LaunchSecurity {
	ls := &LaunchSecurity{}
	if f.SEV != nil && f.SEV.Supported == "yes" {
		ls.SEV = true
		n, _ := strconv.ParseUint(strings.TrimSpace(f.SEV.MaxESGuests), 10, 32)
		ls.SEVES = n > 0
	}
	if ls.SEVES && f.LaunchSecurity != nil && f.LaunchSecurity.Supported == "yes" {
		for _, e := range f.LaunchSecurity.Enums {
			if e.Name == "sectype" && slices.Contains(e.Values, "sev-snp") {
				ls.SEVSNP = true
			}
		}
	}
	ls.TDX = f.TDX != nil && f.TDX.Supported == "yes"
	ls.S390PV = f.S390PV != nil && f.S390PV.Supported == "yes"
	return ls
}

type featureXML struct {
	Name   string `xml:"name,attr"`
	Policy string `xml:"policy,attr"`
}

// ParseDomainCapabilities parses the output of virConnectGetDomainCapabilities
// (`virsh domcapabilities`).
func ParseDomainCapabilities(data []byte) (*DomainCapabilities, error) {
	var x domainCapsXML
	if err := unmarshalStrictRoot(data, &x); err != nil {
		return nil, fmt.Errorf("parsing domain capabilities XML: %w", err)
	}
	dc := &DomainCapabilities{
		Arch:     strings.TrimSpace(x.Arch),
		VirtType: strings.TrimSpace(x.Domain),
		Machine:  strings.TrimSpace(x.Machine),
	}
	for _, mode := range x.Modes {
		switch mode.Name {
		case "host-model":
			if mode.Supported != "yes" || len(mode.Models) == 0 {
				continue
			}
			name := strings.TrimSpace(mode.Models[0].Name)
			if name == "" {
				return nil, errors.New("parsing domain capabilities XML: host-model mode has an empty <model>")
			}
			hm := &HostModel{Name: name, Vendor: strings.TrimSpace(mode.Vendor)}
			var req, dis []string
			for _, f := range mode.Features {
				switch f.Policy {
				case "require":
					req = append(req, f.Name)
				case "disable":
					dis = append(dis, f.Name)
				default:
					if name := strings.TrimSpace(f.Name); name != "" {
						hm.Other = append(hm.Other, CPUFeature{Name: name, Policy: f.Policy})
					}
				}
			}
			hm.Required, hm.Disabled = sortedSet(req), sortedSet(dis)
			dc.HostModel = hm
		case "custom":
			if mode.Supported != "yes" {
				continue
			}
			seen := map[string]bool{}
			for _, m := range mode.Models {
				name := strings.TrimSpace(m.Name)
				if name == "" || seen[name] {
					continue
				}
				seen[name] = true
				dc.Models = append(dc.Models, Model{
					Name:       name,
					Usable:     m.Usable == "yes",
					Usability:  strings.TrimSpace(m.Usable),
					Vendor:     m.Vendor,
					Deprecated: m.Deprecated == "yes",
				})
			}
		}
	}
	if f := x.Features; f != nil {
		dc.Security = f.security()
	}
	return dc, nil
}

// Capabilities is the part of `virsh capabilities` discovery needs.
type Capabilities struct {
	// Arch is the host CPU's architecture.
	Arch string
	// TSC is nil when the host CPU has no <counter name='tsc'>.
	TSC *TSC
	// Guests are the guest architectures libvirt can run.
	Guests []Guest
}

// Guest is one <guest> of the host capabilities.
type Guest struct {
	OSType string
	Arch   string
	// Machines are the machine types listed under <arch>, sorted.
	Machines []string
	// Domains are the domain types (kvm, qemu) this arch can run.
	Domains []string
}

type capsXML struct {
	XMLName xml.Name `xml:"capabilities"`
	Host    struct {
		CPU struct {
			Arch     string `xml:"arch"`
			Counters []struct {
				Name      string `xml:"name,attr"`
				Frequency string `xml:"frequency,attr"`
				Scaling   string `xml:"scaling,attr"`
			} `xml:"counter"`
		} `xml:"cpu"`
	} `xml:"host"`
	Guests []struct {
		OSType string `xml:"os_type"`
		Arch   struct {
			Name     string   `xml:"name,attr"`
			Machines []string `xml:"machine"`
			Domains  []struct {
				Type string `xml:"type,attr"`
			} `xml:"domain"`
		} `xml:"arch"`
	} `xml:"guest"`
}

// ParseCapabilities parses the output of virConnectGetCapabilities
// (`virsh capabilities`).
func ParseCapabilities(data []byte) (*Capabilities, error) {
	var x capsXML
	if err := unmarshalStrictRoot(data, &x); err != nil {
		return nil, fmt.Errorf("parsing capabilities XML: %w", err)
	}
	c := &Capabilities{Arch: strings.TrimSpace(x.Host.CPU.Arch)}
	for _, ctr := range x.Host.CPU.Counters {
		if ctr.Name != "tsc" {
			continue
		}
		t := &TSC{Scalable: ctr.Scaling == "yes"}
		if ctr.Frequency != "" {
			f, err := strconv.ParseUint(strings.TrimSpace(ctr.Frequency), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parsing capabilities XML: tsc counter frequency %q: %w", ctr.Frequency, err)
			}
			t.Frequency = f
		}
		c.TSC = t
		break
	}
	for _, g := range x.Guests {
		guest := Guest{
			OSType:   strings.TrimSpace(g.OSType),
			Arch:     strings.TrimSpace(g.Arch.Name),
			Machines: sortedSet(g.Arch.Machines),
		}
		for _, d := range g.Arch.Domains {
			guest.Domains = append(guest.Domains, d.Type)
		}
		guest.Domains = sortedSet(guest.Domains)
		c.Guests = append(c.Guests, guest)
	}
	return c, nil
}

// MachineTypes returns the machine types of every guest, whatever its
// architecture: the machine-type.node.kubevirt.io/ family, as KubeVirt
// computes it (cmd/virt-handler getMachines at kubevirt/kubevirt d923fdb: the
// <machine> elements under each <guest>'s <arch>, all under one prefix, with
// no architecture in the key). A host with qemu-system-aarch64 installed thus
// gets the virt machines too, which cross-architecture VMs select.
func (c *Capabilities) MachineTypes() []string {
	var out []string
	for _, g := range c.Guests {
		out = append(out, g.Machines...)
	}
	return sortedSet(out)
}

// CPU is a guest CPU definition, as hypervisor-cpu-baseline prints it and as
// it takes it.
type CPU struct {
	Mode     string
	Match    string
	Model    string
	Fallback string
	Vendor   string
	Features []CPUFeature
}

// CPUFeature is one <feature> of a CPU definition.
type CPUFeature struct {
	Name   string
	Policy string
}

type cpuXML struct {
	XMLName xml.Name `xml:"cpu"`
	Mode    string   `xml:"mode,attr,omitempty"`
	Match   string   `xml:"match,attr,omitempty"`
	Model   *struct {
		Name     string `xml:",chardata"`
		Fallback string `xml:"fallback,attr,omitempty"`
	} `xml:"model"`
	Vendor   string       `xml:"vendor,omitempty"`
	Features []featureXML `xml:"feature"`
}

// ParseCPU parses a <cpu> element, such as the output of
// virConnectBaselineHypervisorCPU.
func ParseCPU(data []byte) (*CPU, error) {
	var x cpuXML
	if err := unmarshalStrictRoot(data, &x); err != nil {
		return nil, fmt.Errorf("parsing CPU XML: %w", err)
	}
	c := &CPU{Mode: x.Mode, Match: x.Match, Vendor: strings.TrimSpace(x.Vendor)}
	if x.Model != nil {
		c.Model = strings.TrimSpace(x.Model.Name)
		c.Fallback = x.Model.Fallback
	}
	for _, f := range x.Features {
		name := strings.TrimSpace(f.Name)
		if name == "" {
			continue
		}
		c.Features = append(c.Features, CPUFeature{Name: name, Policy: f.Policy})
	}
	return c, nil
}

// FeaturesWithPolicy returns the distinct names of the features with policy p,
// sorted. libvirt's default policy, for a <feature> without one, is require.
func (c *CPU) FeaturesWithPolicy(p string) []string {
	var out []string
	for _, f := range c.Features {
		pol := f.Policy
		if pol == "" {
			pol = "require"
		}
		if pol == p {
			out = append(out, f.Name)
		}
	}
	return sortedSet(out)
}

// FeatureNames returns the distinct names of all features, whatever their
// policy, sorted.
func (c *CPU) FeatureNames() []string {
	out := make([]string, 0, len(c.Features))
	for _, f := range c.Features {
		out = append(out, f.Name)
	}
	return sortedSet(out)
}

// XML renders c as a <cpu> element libvirt accepts.
func (c *CPU) XML() (string, error) {
	x := cpuXML{Mode: c.Mode, Match: c.Match, Vendor: c.Vendor}
	if c.Model != "" || c.Fallback != "" {
		x.Model = &struct {
			Name     string `xml:",chardata"`
			Fallback string `xml:"fallback,attr,omitempty"`
		}{Name: c.Model, Fallback: c.Fallback}
	}
	for _, f := range c.Features {
		x.Features = append(x.Features, featureXML(f))
	}
	b, err := xml.Marshal(x)
	if err != nil {
		return "", fmt.Errorf("rendering CPU XML for model %q: %w", c.Model, err)
	}
	return string(b), nil
}

// hostModelCPU is the host-model CPU as `virsh hypervisor-cpu-baseline` builds
// it from a domcapabilities document: a custom CPU with match='exact' that
// keeps the host model's features with their policies.
func hostModelCPU(hm *HostModel) *CPU {
	c := &CPU{Mode: "custom", Match: "exact", Model: hm.Name, Fallback: "forbid", Vendor: hm.Vendor}
	for _, f := range hm.Required {
		c.Features = append(c.Features, CPUFeature{Name: f, Policy: "require"})
	}
	for _, f := range hm.Disabled {
		c.Features = append(c.Features, CPUFeature{Name: f, Policy: "disable"})
	}
	c.Features = append(c.Features, hm.Other...)
	return c
}

// namedModelCPU is the input for expanding one model's features.
func namedModelCPU(model string) *CPU {
	return &CPU{Mode: "custom", Match: "exact", Model: model, Fallback: "forbid"}
}

// unmarshalStrictRoot decodes data into v and refuses trailing elements after
// the root, which encoding/xml would otherwise ignore; a second document
// glued to the first is a sign of a wrong input file.
func unmarshalStrictRoot(data []byte, v any) error {
	d := xml.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(v); err != nil {
		return err
	}
	for {
		tok, err := d.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return fmt.Errorf("unexpected element <%s> after the document's root", t.Name.Local)
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return errors.New("unexpected text after the document's root")
			}
		}
	}
}
