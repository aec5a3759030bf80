package testenv

import (
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
)

// DomainCapabilities is what the label tests compare node-agent's labels
// with in `virsh domcapabilities`: the CPU models of mode custom, and the
// model libvirt names for mode host-model.
type DomainCapabilities struct {
	// HostModel is the model of mode host-model: what KubeVirt's
	// host-model-cpu label names.
	HostModel string
	// Models are the models of mode custom, in libvirt's order.
	Models []DomainCPUModel
}

// DomainCPUModel is one <model> of mode custom.
type DomainCPUModel struct {
	Name string
	// Usable is libvirt's usable attribute: "yes", "no" or "unknown"; empty
	// when libvirt does not know the model on this host.
	Usable string
}

// ParseDomainCapabilities reads the output of `virsh domcapabilities`.
func ParseDomainCapabilities(data []byte) (DomainCapabilities, error) {
	var doc struct {
		Modes []struct {
			Name   string `xml:"name,attr"`
			Models []struct {
				Name   string `xml:",chardata"`
				Usable string `xml:"usable,attr"`
			} `xml:"model"`
		} `xml:"cpu>mode"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return DomainCapabilities{}, fmt.Errorf("domain capabilities: %w", err)
	}
	var dc DomainCapabilities
	for _, m := range doc.Modes {
		for _, md := range m.Models {
			name := strings.TrimSpace(md.Name)
			switch m.Name {
			case "host-model":
				dc.HostModel = name
			case "custom":
				dc.Models = append(dc.Models, DomainCPUModel{Name: name, Usable: md.Usable})
			}
		}
	}
	return dc, nil
}

// ModelFamilies returns, sorted, the models KubeVirt v1.7 and later give a
// cpu-model-migration label (every model libvirt knows here, usable or not)
// and a cpu-model label (the usable ones), leaving out those obsolete says
// are obsolete.
func (dc DomainCapabilities) ModelFamilies(obsolete func(string) bool) (known, usable []string) {
	for _, m := range dc.Models {
		if m.Usable == "" || obsolete(m.Name) {
			continue
		}
		known = append(known, m.Name)
		if m.Usable != "no" {
			usable = append(usable, m.Name)
		}
	}
	slices.Sort(known)
	slices.Sort(usable)
	return known, usable
}
