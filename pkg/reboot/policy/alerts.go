package policy

import (
	"regexp"
	"strconv"
)

// CompileAlertRegexp compiles reboot.blockingAlertRegexp anchored at both
// ends, as Prometheus anchors its own =~ matchers, so that "Etcd" does not
// also match "EtcdHighFsyncDurations". "" gives nil: every alert.
func CompileAlertRegexp(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile("^(?:" + expr + ")$")
}

// AlertsQuery is the PromQL query of the firing alerts that
// reboot.blockingAlertRegexp selects: every series of ALERTS in state
// firing, narrowed by alertname =~ expr. Prometheus anchors =~ at both ends,
// as CompileAlertRegexp does, so the query selects what the regexp matches.
// It is reboot.gates' first gate: the alert check is one gate among them.
func AlertsQuery(expr string) string {
	if expr == "" {
		return `ALERTS{alertstate="firing"}`
	}
	// PromQL's string literals take Go's escapes.
	return `ALERTS{alertstate="firing",alertname=~` + strconv.Quote(expr) + `}`
}
