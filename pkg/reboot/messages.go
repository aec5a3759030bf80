package reboot

import (
	"fmt"
	"strings"
	"time"
)

// retryLine says when the attempt after failure starts.
func retryLine(f Failure) string {
	times := "once"
	if f.Count > 1 {
		times = fmt.Sprintf("%d times in a row", f.Count)
	}
	return fmt.Sprintf("the drain failed %s; no new attempt before %s (the wait doubles from reboot.checkInterval up to %s) unless one is asked for (node-agent reboot request)",
		times, f.RetryAt.UTC().Format(time.RFC3339), formatDuration(DrainFailedBackoffCap))
}

// formatDuration is d without the zero units time.Duration prints (24h,
// not 24h0m0s).
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// lateBlockers reports blockers found after the drain started, without
// changing the decision.
func lateBlockers(d Decision, bs []Blocker) Decision {
	if len(bs) == 0 {
		return d
	}
	d.Blockers = bs
	pods, alerts, gates, vms := split(bs)
	d.Message += "; " + blockedBy(pods, alerts, gates, vms) + " since the drain started, which does not stop it"
	return d
}

func split(bs []Blocker) (pods, alerts, gates, vms []string) {
	for _, b := range bs {
		switch b.Kind {
		case BlockerPod:
			pods = append(pods, b.Name)
		case BlockerGate:
			gates = append(gates, b.Name)
		case BlockerVM:
			vms = append(vms, b.Name)
		default:
			alerts = append(alerts, b.Name)
		}
	}
	return pods, alerts, gates, vms
}

func blockedBy(pods, alerts, gates, vms []string) string {
	var parts []string
	if len(pods) > 0 {
		parts = append(parts, "pods "+names(pods))
	}
	if len(alerts) > 0 {
		parts = append(parts, "alerts "+names(alerts))
	}
	if len(gates) > 0 {
		parts = append(parts, "gates "+strings.Join(gates, "; "))
	}
	if len(vms) > 0 {
		parts = append(parts, "VMs that cannot leave by live migration "+strings.Join(vms, "; "))
	}
	return "blocked by " + strings.Join(parts, " and ")
}

// maxNames bounds the names in a condition message, which people read and
// the apiserver stores on every change.
const maxNames = 5

func names(ns []string) string {
	if len(ns) <= maxNames {
		return strings.Join(ns, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ns[:maxNames], ", "), len(ns)-maxNames)
}
