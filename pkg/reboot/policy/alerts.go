package policy

import "regexp"

// CompileAlertRegexp compiles reboot.blockingAlertRegexp anchored at both
// ends, as Prometheus anchors its own =~ matchers, so that "Etcd" does not
// also match "EtcdHighFsyncDurations". "" gives nil: every alert.
func CompileAlertRegexp(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile("^(?:" + expr + ")$")
}
