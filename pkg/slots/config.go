package slots

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/node-agent/node-agent/pkg/config"
)

// DefaultPool names the pool of every node, limited by slots.limit.
const DefaultPool = "default"

// Pools turns slots.limit and slots.pools into Decide's pools; the default
// pool comes first.
func Pools(d config.SlotsConfig) ([]Pool, error) {
	pools := []Pool{{Name: DefaultPool, Limit: d.Limit}}
	for _, p := range d.Pools {
		sel, err := labels.Parse(p.Selector)
		if err != nil {
			return nil, fmt.Errorf("slots.pools %s: selector %q: %w", p.Name, p.Selector, err)
		}
		key := p.TopologyKey
		if key == "" {
			key = config.DefaultTopologyKey
		}
		pools = append(pools, Pool{Name: p.Name, Selector: sel, Limit: p.Limit, MaxUnavailable: p.MaxUnavailable,
			MaxUnhealthy: p.MaxUnhealthy, MaxDomains: p.MaxDomains, TopologyKey: key,
			RecoveryBound: p.RecoveryBound.Duration})
	}
	return pools, nil
}

// MaxHold is, per purpose, how long a slot may be held in all before the
// coordinator takes it back, heartbeat or not: a backstop for an agent
// that renews but never finishes (the agent's own drain.timeout ends a
// stuck drain first).
//   - maintenance: drain.timeout, and slots.heartbeatBound for the agent
//     to undo and release;
//   - reboot: the drain, the reboot (reboot.slotHoldBound), and a quarter
//     of an hour for the node to become Ready and be uncordoned.
//
// With drain.timeout 0 (no timeout) no such bound is set.
func MaxHold(c config.Config) map[Purpose]time.Duration {
	timeout := c.Drain.Timeout.Duration
	if timeout <= 0 {
		return nil
	}
	return map[Purpose]time.Duration{
		PurposeMaintenance: timeout + c.Slots.HeartbeatBound.Duration,
		PurposeReboot:      timeout + c.Reboot.SlotHoldBound.Duration + 15*time.Minute,
	}
}

// Off names the purposes the configuration c does not serve, and why: a
// reboot slot while reboot.enabled is false. Requests for them are refused
// (Input.Off), so a node's token cannot hold the cluster's slots for a
// purpose the admin turned off.
func Off(c config.Config) map[Purpose]string {
	off := map[Purpose]string{}
	if !c.Reboot.Enabled {
		off[PurposeReboot] = "reboot.enabled is false in the coordinator's configuration, so no reboot slot is granted; set reboot.enabled: true in node-agent-config to coordinate reboots"
	}
	return off
}
