package metrics

import (
	"fmt"
	"regexp"
	"strings"
)

// Subsystems are the second part of every metric name, one per component,
// in docs/glossary.md's words: node_agent_<subsystem>_<what>[_<unit>].
// build, admission_policy, own_node, pod_access and notifications name a
// single metric each.
var Subsystems = []string{
	"build", "admission_policy", "own_node", "pod_access", "notifications",
	"label", "drain", "maintenance", "wait_bound", "reboot", "shutdown", "silence",
	"drain_slot",
}

// Rename is a metric that changed its name, for docs/metrics.md's list.
type Rename struct{ Old, New, Why string }

// Renamed lists the metrics renamed to the one style, so that users can
// update dashboards and rules.
var Renamed = []Rename{
	{"node_agent_evictions_total", "node_agent_drain_evictions_total", "the drain's subsystem"},
	{"node_agent_reboots_total", "node_agent_reboot_attempts_total", "the reboot controller's subsystem"},
	{"node_agent_labels_managed", "node_agent_label_managed", "one subsystem, label, for the labeller"},
	{"node_agent_discovery_duration_seconds", "node_agent_label_discovery_duration_seconds", "one subsystem, label, for the labeller"},
	{"node_agent_maintenance_start_time_seconds", "node_agent_maintenance_start_timestamp_seconds", "a Unix time ends in _timestamp_seconds, as node_agent_reboot_required_since_timestamp_seconds"},
}

var (
	nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*[a-z0-9]$`)
	timeRE = regexp.MustCompile(`(^|_)(time|since)(_|$)`)
)

// CheckName says what in name breaks the one style: the prefix and a
// subsystem of Subsystems, _total only on counters (counter says whether
// it is one), and a Unix time as _timestamp_seconds.
func CheckName(name string, counter bool) error {
	rest, ok := strings.CutPrefix(name, Namespace+"_")
	if !ok || !nameRE.MatchString(name) {
		return fmt.Errorf("%s: want %s_<subsystem>_<what> in lower snake case", name, Namespace)
	}
	sub := ""
	for _, s := range Subsystems {
		if (rest == s || strings.HasPrefix(rest, s+"_")) && len(s) > len(sub) {
			sub = s
		}
	}
	if sub == "" {
		return fmt.Errorf("%s: its subsystem is none of %v", name, Subsystems)
	}
	if counter != strings.HasSuffix(name, "_total") {
		return fmt.Errorf("%s: a counter, and only a counter, ends in _total", name)
	}
	if timeRE.MatchString(rest) && !strings.HasSuffix(name, "_timestamp_seconds") {
		return fmt.Errorf("%s: a point in time ends in _timestamp_seconds", name)
	}
	return nil
}
