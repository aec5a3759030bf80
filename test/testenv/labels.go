package testenv

import (
	"sort"
	"strings"

	"github.com/node-agent/node-agent/pkg/labeller"
)

// OwnedLabels keeps the labels node-agent's labeller owns.
func OwnedLabels(all map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if labeller.IsOwnedKey(k) {
			out[k] = v
		}
	}
	return out
}

// DiffLabels lists how b differs from a, sorted: "-key=value" for a label
// of a that b lacks or has with another value, "+key=value" for b's side.
func DiffLabels(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, "-"+k+"="+v)
		}
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			out = append(out, "+"+k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

// LabelFamily returns, sorted, the names under prefix (such as
// kubevirtlabels.CPUModelLabelPrefix) whose label is "true".
func LabelFamily(labels map[string]string, prefix string) []string {
	var names []string
	for k, v := range labels {
		if n, ok := strings.CutPrefix(k, prefix); ok && v == "true" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
