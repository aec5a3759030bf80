package property

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/node-agent/node-agent/pkg/maintenance"
)

// eventKind is what an event does.
type eventKind int

const (
	maintenanceToggle eventKind = iota
	nodeMaintenanceCreate
	nodeMaintenanceDelete
	rebootRequest
	rebootWithdraw
	sentinelCreate
	agentKill
	holderKill
	agentRestart
	leaderKill
	coordinatorRestart
)

// weights are how often each kind comes, relative to the others.
var weights = []struct {
	kind   eventKind
	weight int
}{
	{maintenanceToggle, 30},
	{nodeMaintenanceCreate, 10},
	{nodeMaintenanceDelete, 8},
	{rebootRequest, 6},
	{rebootWithdraw, 2},
	{sentinelCreate, 3},
	{agentKill, 8},
	{holderKill, 6},
	{agentRestart, 24},
	{leaderKill, 4},
	{coordinatorRestart, 5},
}

// event is one step of the sequence.
type event struct {
	kind eventKind
	node string
	// on, for maintenanceToggle: set (true) or remove the annotation.
	on bool
	// group and name, for NodeMaintenance objects.
	group, name string
	coordinator string
	// pick chooses, for holderKill, among the nodes holding a slot then.
	pick int
	// gap is the pause after the event.
	gap time.Duration
}

func (e event) String() string {
	switch e.kind {
	case maintenanceToggle:
		if e.on {
			return "maintenance annotation on " + e.node
		}
		return "maintenance annotation off " + e.node
	case nodeMaintenanceCreate:
		return fmt.Sprintf("create NodeMaintenance %s/%s for %s", e.group, e.name, e.node)
	case nodeMaintenanceDelete:
		if e.name == "" {
			return "delete a NodeMaintenance (none left)"
		}
		return fmt.Sprintf("delete NodeMaintenance %s/%s (%s)", e.group, e.name, e.node)
	case rebootRequest:
		return "reboot requested for " + e.node
	case rebootWithdraw:
		return "reboot request withdrawn from " + e.node
	case sentinelCreate:
		return "reboot sentinel on " + e.node
	case agentKill:
		return "kill the agent of " + e.node
	case holderKill:
		return "kill the agent of a node holding a slot"
	case agentRestart:
		return "restart the agent of " + e.node
	case leaderKill:
		return "kill the leading coordinator"
	case coordinatorRestart:
		return "restart " + e.coordinator
	}
	return "?"
}

// sequence draws the events from the seed. It keeps what only the test
// changes (the maintenance annotations, the NodeMaintenance objects it made),
// so the sequence does not depend on how the cluster answered.
type sequence struct {
	rng       *rand.Rand
	nodes     []string
	annotated map[string]bool
	objects   []event // NodeMaintenance objects made and not yet deleted
	count     int
	total     int
}

func newSequence(seed uint64, nodes []string) *sequence {
	s := &sequence{rng: rand.New(rand.NewPCG(seed, 0)), nodes: nodes, annotated: map[string]bool{}}
	for _, w := range weights {
		s.total += w.weight
	}
	return s
}

func (s *sequence) next() event {
	s.count++
	pick := s.rng.IntN(s.total)
	var kind eventKind
	for _, w := range weights {
		if pick < w.weight {
			kind = w.kind
			break
		}
		pick -= w.weight
	}
	e := event{kind: kind, node: s.nodes[s.rng.IntN(len(s.nodes))],
		gap: 300*time.Millisecond + time.Duration(s.rng.Int64N(int64(2700*time.Millisecond)))}
	switch kind {
	case maintenanceToggle:
		e.on = !s.annotated[e.node]
		s.annotated[e.node] = e.on
	case nodeMaintenanceCreate:
		e.group = maintenance.NodeMaintenanceGroups[s.rng.IntN(len(maintenance.NodeMaintenanceGroups))]
		e.name = fmt.Sprintf("%s-%d", e.node, s.count)
		s.objects = append(s.objects, e)
	case nodeMaintenanceDelete:
		if len(s.objects) > 0 {
			i := s.rng.IntN(len(s.objects))
			o := s.objects[i]
			s.objects = append(s.objects[:i], s.objects[i+1:]...)
			e.node, e.group, e.name = o.node, o.group, o.name
		}
	case holderKill:
		e.node, e.pick = "", s.rng.IntN(1<<16)
	case leaderKill:
		e.node = ""
	case coordinatorRestart:
		e.node = ""
		e.coordinator = coordinatorIDs[s.rng.IntN(len(coordinatorIDs))]
	}
	return e
}
