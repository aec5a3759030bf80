package kubevirtcr

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// readTargetPodFields reads the fields pkg/targetpod needs into s. As in
// settingsOf, a field of the wrong type is left out and named.
func (s *Settings) readTargetPodFields(o *unstructured.Unstructured) []string {
	var problems []string
	bad := func(path, want string, v any) {
		problems = append(problems, fmt.Sprintf("%s: %s is a %T, not %s; ignored", s.CR, path, v, want))
	}
	field := func(path ...string) (any, bool) {
		v, found, err := unstructured.NestedFieldNoCopy(o.Object, path...)
		return v, err == nil && found && v != nil
	}
	conf := []string{"spec", "configuration"}
	dev := append(slices.Clone(conf), "developerConfiguration")
	for _, f := range []struct {
		path []string
		to   *string
	}{
		{append(slices.Clone(conf), "additionalGuestMemoryOverheadRatio"), &s.AdditionalGuestMemoryOverheadRatio},
		{append(slices.Clone(conf), "defaultRuntimeClass"), &s.DefaultRuntimeClass},
		{[]string{"status", "observedKubeVirtVersion"}, &s.ObservedVersion},
	} {
		if v, ok := field(f.path...); ok {
			if str, isStr := v.(string); isStr {
				*f.to = str
			} else {
				bad(dotted(f.path), "a string", v)
			}
		}
	}
	for _, f := range []struct {
		key string
		to  *int
	}{{"memoryOvercommit", &s.MemoryOvercommit}, {"cpuAllocationRatio", &s.CPUAllocationRatio}} {
		if v, ok := field(append(slices.Clone(dev), f.key)...); ok {
			switch n := v.(type) {
			case int64:
				*f.to = int(n)
			case float64:
				*f.to = int(n)
			default:
				bad(dotted(dev)+"."+f.key, "a number", v)
			}
		}
	}
	if v, ok := field(append(slices.Clone(dev), "useEmulation")...); ok {
		if b, isBool := v.(bool); isBool {
			s.UseEmulation = b
		} else {
			bad(dotted(dev)+".useEmulation", "a boolean", v)
		}
	}
	if v, ok := field(append(slices.Clone(dev), "nodeSelectors")...); ok {
		if m, isMap := v.(map[string]any); isMap {
			s.NodeSelectors = map[string]string{}
			for k, val := range m {
				str, _ := val.(string)
				s.NodeSelectors[k] = str
			}
		} else {
			bad(dotted(dev)+".nodeSelectors", "a map", v)
		}
	}
	// KubeVirt tests whether disableSerialConsoleLog is there, not what it
	// holds (an empty object).
	_, s.SerialConsoleLogDisabled = field(append(slices.Clone(conf), "virtualMachineOptions", "disableSerialConsoleLog")...)
	problems = append(problems, s.readNetworkBindings(o)...)
	return problems
}

// readNetworkBindings reads spec.configuration.network.binding: for each
// plugin, the memory its computeResourceOverhead requests.
func (s *Settings) readNetworkBindings(o *unstructured.Unstructured) []string {
	v, found, err := unstructured.NestedFieldNoCopy(o.Object, "spec", "configuration", "network", "binding")
	if err != nil || !found || v == nil {
		return nil
	}
	bindings, ok := v.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: spec.configuration.network.binding is a %T, not a map; ignored", s.CR, v)}
	}
	var problems []string
	for name, b := range bindings {
		plugin, _ := b.(map[string]any)
		mem, found, err := unstructured.NestedFieldNoCopy(plugin, "computeResourceOverhead", "requests", "memory")
		if err != nil || !found || mem == nil {
			continue
		}
		q, err := quantity(mem)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: spec.configuration.network.binding.%s.computeResourceOverhead.requests.memory: %v; ignored", s.CR, name, err))
			continue
		}
		if s.NetworkBindings == nil {
			s.NetworkBindings = map[string]resource.Quantity{}
		}
		s.NetworkBindings[name] = q
	}
	return problems
}

// quantity reads a Kubernetes quantity as JSON holds it: text, or a bare
// number.
func quantity(v any) (resource.Quantity, error) {
	switch x := v.(type) {
	case string:
		return resource.ParseQuantity(x)
	case int64:
		return *resource.NewQuantity(x, resource.DecimalSI), nil
	case float64:
		return resource.ParseQuantity(fmt.Sprint(x))
	}
	return resource.Quantity{}, fmt.Errorf("a %T, not a quantity", v)
}

func dotted(path []string) string { return strings.Join(path, ".") }
