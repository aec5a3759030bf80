package reboot

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/config"
	"github.com/node-agent/node-agent/pkg/gates"
)

// BlockerSources are what may hold a reboot of rc, in the order they are
// asked:
//
//  1. vms, the VMs that cannot leave the node: they hold a reboot before
//     its drain, as they hold a maintenance;
//  2. with reboot.blockingPodSelector, the node's pods it selects (pods
//     lists them, as the agent's pod access says), limited to
//     reboot.blockingPodNamespaces when set;
//  3. with reboot.prometheusURL, the alert check (reboot.blockingAlertRegexp)
//     first, then reboot.gates in their order, each query bounded by
//     gates.Timeout.
//
// The order is the order of the reasons a waiting node shows.
func BlockerSources(rc config.RebootConfig, vms BlockerSource, pods PodLister) ([]BlockerSource, error) {
	out := []BlockerSource{vms}
	if rc.BlockingPodSelector != "" {
		sel, err := labels.Parse(rc.BlockingPodSelector)
		if err != nil {
			return nil, fmt.Errorf("reboot.blockingPodSelector: %w", err)
		}
		out = append(out, PodBlockers{Lister: pods, Selector: sel, Namespaces: rc.BlockingPodNamespaces})
	}
	if rc.PrometheusURL != "" {
		gs := []gates.Gate{gates.AlertGate(rc.BlockingAlertRegexp)}
		for _, g := range rc.Gates {
			gs = append(gs, gates.Gate{Name: g.Name, Query: g.Query, BeforeReboot: g.BeforeReboot})
		}
		out = append(out, gates.Prometheus{URL: rc.PrometheusURL, Gates: gs, Client: &http.Client{Timeout: gates.Timeout}})
	}
	return out, nil
}
