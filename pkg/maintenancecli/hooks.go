package maintenancecli

import (
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/node-agent/node-agent/pkg/hooks"
	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// writeHooks prints the hooks on node (pkg/hooks) and what they do to its
// maintenance: a drained maintenance that post-drain hooks hold is not
// done, though its record says Succeeded. The bound is the agent's
// (maintenance.hookBound), which this command does not read: it says from
// when it counts.
func writeHooks(out io.Writer, node *corev1.Node) error {
	st, err := selfdrain.ParseStatus(node)
	if err != nil {
		st = nil
	}
	var b strings.Builder
	for _, p := range hooks.Phases {
		s := hooks.Parse(node.Annotations, p)
		if s.Empty() {
			continue
		}
		what := "hold the next drain before the cordon"
		switch {
		case p == hooks.PreDrain && st.Active() && st.Phase == selfdrain.PhaseWaiting:
			what = "hold this drain before the cordon"
		case p == hooks.PreDrain && st.Active():
			what = "hold nothing now: this drain has begun"
		case p == hooks.PostDrain && st.Active() && st.Phase == selfdrain.PhaseSucceeded && st.Trigger != selfdrain.TriggerShutdown:
			what = "hold this drained maintenance: it is not done"
			if st.LastUpdate != nil {
				what += fmt.Sprintf(" (at most maintenance.hookBound from %s)", st.LastUpdate.UTC().Format(time.RFC3339))
			}
		case p == hooks.PostDrain:
			what = "will hold the maintenance once its pods are gone"
		}
		fmt.Fprintf(&b, "%s hooks (%s): %s\n", p, what, printable(s.Names()))
		for _, problem := range s.Problems() {
			fmt.Fprintf(&b, "  malformed, holds all the same: %s\n", printable(problem))
		}
	}
	if b.Len() == 0 {
		return nil
	}
	_, err = fmt.Fprintf(out, "\n%s", b.String())
	return err
}
