// Package baseline owns the cluster CPU baseline: from the CPU labels of a
// set of Nodes (KubeVirt's keys, written by node-agent or by KubeVirt's own
// labeller), the newest CPU model every one of them can run, the CPU
// features they all share, and for each newer model the nodes that hold it
// back. A VM given that model can live-migrate to any node of the set, as
// VMware EVC gives a cluster one CPU baseline.
//
// It only reads labels; it changes nothing.
package baseline

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/kube"
	"github.com/node-agent/node-agent/pkg/kubevirtlabels"
)

// NodeCPU is what one Node's labels say about its CPU.
type NodeCPU struct {
	Name string `json:"name"`
	// Models are the cpu-model labels set to "true", sorted.
	Models []string `json:"models"`
	// Features are the cpu-feature labels set to "true", sorted.
	Features []string `json:"features"`
	// HostModel and Vendor are from host-model-cpu and cpu-vendor; empty
	// when absent.
	HostModel string `json:"hostModel,omitempty"`
	Vendor    string `json:"vendor,omitempty"`
}

// FromNode reads a Node's CPU labels.
func FromNode(n *corev1.Node) NodeCPU {
	c := NodeCPU{Name: n.Name, Models: []string{}, Features: []string{}}
	for k, v := range n.Labels {
		if v != "true" {
			continue
		}
		switch {
		case strings.HasPrefix(k, kubevirtlabels.CPUModelLabelPrefix):
			c.Models = append(c.Models, strings.TrimPrefix(k, kubevirtlabels.CPUModelLabelPrefix))
		case strings.HasPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix):
			c.Features = append(c.Features, strings.TrimPrefix(k, kubevirtlabels.CPUFeatureLabelPrefix))
		case strings.HasPrefix(k, kubevirtlabels.HostModelCPULabelPrefix):
			c.HostModel = strings.TrimPrefix(k, kubevirtlabels.HostModelCPULabelPrefix)
		case strings.HasPrefix(k, kubevirtlabels.CPUVendorLabelPrefix):
			c.Vendor = strings.TrimPrefix(k, kubevirtlabels.CPUVendorLabelPrefix)
		}
	}
	slices.Sort(c.Models)
	slices.Sort(c.Features)
	return c
}

// Result is the baseline of a set of nodes.
type Result struct {
	// Nodes are the nodes considered, by name.
	Nodes []NodeCPU `json:"nodes"`
	// Unlabelled are the nodes without any cpu-model label: no labeller has
	// described them, so they hold back every model.
	Unlabelled []string `json:"unlabelled"`
	// Model is the newest model every node can run; empty when there is
	// none, or when no model every node can run has a known generation.
	Model string `json:"model"`
	// Common are all the models every node can run, newest first.
	Common []string `json:"common"`
	// SharedFeatures are the cpu-feature labels every node has, sorted.
	SharedFeatures []string `json:"sharedFeatures"`
	// Candidates are the models at least one node can run that are newer
	// than Model (all of them when Model is empty), newest first, each with
	// the nodes that cannot run it.
	Candidates []Candidate `json:"candidates"`
	// Notes explain what the result cannot say.
	Notes []string `json:"notes,omitempty"`
}

// Candidate is one model and the nodes holding it back.
type Candidate struct {
	Model string `json:"model"`
	// Generation is the model's place in the built-in order; 0 when the
	// model is not in it.
	Generation int `json:"generation"`
	// Nodes is how many of the nodes can run it.
	Nodes int `json:"nodes"`
	// HeldBackBy are the nodes that cannot run it, sorted.
	HeldBackBy []string `json:"heldBackBy"`
}

// Compute finds the baseline of nodes.
func Compute(nodes []NodeCPU) *Result {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b NodeCPU) int { return strings.Compare(a.Name, b.Name) })
	r := &Result{Nodes: nodes, Unlabelled: []string{}, Common: []string{}, SharedFeatures: []string{}, Candidates: []Candidate{}}
	if len(nodes) == 0 {
		r.Notes = append(r.Notes, "no node selected")
		return r
	}
	runs := map[string]map[string]bool{} // model -> nodes that can run it
	for _, n := range nodes {
		if len(n.Models) == 0 {
			r.Unlabelled = append(r.Unlabelled, n.Name)
		}
		for _, m := range n.Models {
			if runs[m] == nil {
				runs[m] = map[string]bool{}
			}
			runs[m][n.Name] = true
		}
	}
	if len(r.Unlabelled) > 0 {
		r.Notes = append(r.Notes, "nodes without cpu-model labels hold back every model: is a labeller (node-agent or KubeVirt's) running there, and is node-labeller.kubevirt.io/skip-node unset?")
	}

	all := make([]Candidate, 0, len(runs))
	for m, on := range runs {
		c := Candidate{Model: m, Generation: Generation(m), Nodes: len(on), HeldBackBy: []string{}}
		for _, n := range nodes {
			if !on[n.Name] {
				c.HeldBackBy = append(c.HeldBackBy, n.Name)
			}
		}
		all = append(all, c)
	}
	slices.SortFunc(all, newerFirst)

	for _, c := range all {
		if len(c.HeldBackBy) == 0 {
			r.Common = append(r.Common, c.Model)
		}
	}
	for _, c := range all {
		if len(c.HeldBackBy) == 0 && c.Generation > 0 {
			r.Model = c.Model
			break
		}
	}
	switch {
	case r.Model != "":
		for _, c := range all {
			if c.Model == r.Model {
				break
			}
			if c.Generation > 0 {
				r.Candidates = append(r.Candidates, c)
			}
		}
	default:
		r.Candidates = all
		if len(r.Common) > 0 {
			r.Notes = append(r.Notes, "every node can run "+strings.Join(r.Common, ", ")+", but none of them is in the built-in generation order; pick one by hand")
		} else {
			r.Notes = append(r.Notes, "no CPU model is usable on every selected node; narrow the selection, or use the features below")
		}
	}

	vendors := map[string]bool{}
	for _, n := range nodes {
		if n.Vendor != "" {
			vendors[n.Vendor] = true
		}
	}
	if len(vendors) > 1 {
		r.Notes = append(r.Notes, fmt.Sprintf("the nodes have CPUs of %d vendors (%s): they share only models that emulate the older generations of one of them; a selector per vendor gives each pool a newer baseline", len(vendors), strings.Join(slices.Sorted(maps.Keys(vendors)), ", ")))
	}
	count := map[string]int{}
	for _, n := range nodes {
		for _, f := range slices.Compact(slices.Sorted(slices.Values(n.Features))) {
			count[f]++
		}
	}
	for f, c := range count {
		if c == len(nodes) {
			r.SharedFeatures = append(r.SharedFeatures, f)
		}
	}
	slices.Sort(r.SharedFeatures)
	r.Notes = append(r.Notes, "cpu-feature labels may leave out the features of a minimum CPU model (node-agent's labeller.minCPUModel, default Penryn); the baseline model's own features are implied by the model")
	return r
}

// newerFirst orders candidates by generation, newest first; models outside
// the built-in order come last, by name.
func newerFirst(a, b Candidate) int {
	if a.Generation != b.Generation {
		return b.Generation - a.Generation
	}
	return strings.Compare(a.Model, b.Model)
}

// generations lists libvirt's x86 model families, oldest first within each
// line of CPUs (Intel cores, Intel Atom-based servers, AMD, Hygon). A model's
// generation is its family's place here, scaled, plus a small score for its
// variant, so that Haswell-IBRS sorts above Haswell and Haswell-noTSX below
// it, and Cascadelake-Server-v4 above Cascadelake-Server-v2. Generations
// compare only within one line in practice: a node pool usually has one
// vendor, and across vendors the common models are old ones.
var generations = []string{
	// Intel
	"Conroe", "Penryn", "Nehalem", "Westmere", "SandyBridge", "IvyBridge",
	"Haswell", "Broadwell", "Skylake-Client", "Skylake-Server", "Cascadelake-Server",
	"Cooperlake", "Icelake-Client", "Icelake-Server", "SapphireRapids", "GraniteRapids",
	// Intel Atom-based servers, placed by their year.
	"Snowridge", "SierraForest", "ClearwaterForest",
	// AMD
	"Opteron_G1", "Opteron_G2", "Opteron_G3", "Opteron_G4", "Opteron_G5",
	"EPYC", "EPYC-Rome", "EPYC-Milan", "EPYC-Genoa", "EPYC-Turin",
	// Hygon
	"Dhyana",
}

var variant = regexp.MustCompile(`^(.*?)((?:-noTSX)?(?:-IBRS|-IBPB)?)(?:-v([0-9]+))?$`)

// Generation returns the place of model in the built-in order, 0 when it is
// not there.
func Generation(model string) int {
	m := variant.FindStringSubmatch(model)
	if m == nil {
		return 0
	}
	i := slices.Index(generations, m[1])
	if i < 0 {
		return 0
	}
	score := 4 // plain
	if strings.Contains(m[2], "noTSX") {
		score -= 2
	}
	if strings.Contains(m[2], "IBRS") || strings.Contains(m[2], "IBPB") {
		score++
	}
	v := 0
	if m[3] != "" {
		v, _ = strconv.Atoi(m[3])
	}
	return (i+1)*1000 + min(v, 99)*10 + score
}

// FromCluster lists the Nodes matching selector (every Node when empty) and
// computes their baseline.
func FromCluster(ctx context.Context, c kube.Interface, selector string) (*Result, error) {
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes (selector %q): %w", selector, err)
	}
	nodes := make([]NodeCPU, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, FromNode(&list.Items[i]))
	}
	return Compute(nodes), nil
}
