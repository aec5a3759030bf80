package hooks

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

type warning struct{ reason, message string }

func TestPreDrainCheck(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	var warned []warning
	c := &PreDrainCheck{Node: func() (*corev1.Node, error) { return node, nil }, Clock: clk, Bound: time.Minute,
		Warn: func(r, m string) { warned = append(warned, warning{r, m}) }}

	if b := c.Blockers(t.Context()); len(b) != 0 {
		t.Fatalf("no hook: %v, want nothing to hold", b)
	}
	node.Annotations = map[string]string{PreDrain.Prefix() + "backup": "velero", PreDrain.Prefix() + "typo": "", PostDrain.Prefix() + "later": "x"}
	b := c.Blockers(t.Context())
	if len(b) != 1 || b[0].Kind != BlockerHook || !strings.HasPrefix(b[0].Name, "backup (velero); typo;") || strings.Contains(b[0].Name, "later") {
		t.Fatalf("blockers %+v, want the two pre-drain hooks, the malformed one too", b)
	}
	if len(warned) != 1 || warned[0].reason != ReasonMalformed || !strings.Contains(warned[0].message, "has no value") {
		t.Fatalf("warnings %+v, want one for the malformed hook", warned)
	}
	clk.Step(30 * time.Second)
	if b := c.Blockers(t.Context()); len(b) != 1 {
		t.Fatalf("within the bound: %v, want the hooks to hold", b)
	}
	if len(warned) != 1 {
		t.Fatalf("warnings %+v, want the malformed hook told once", warned)
	}
	clk.Step(30 * time.Second)
	if b := c.Blockers(t.Context()); len(b) != 0 {
		t.Fatalf("at the bound: %v, want the hooks passed over", b)
	}
	if len(warned) != 2 || warned[1].reason != ReasonPassed || !strings.Contains(warned[1].message, "backup (velero)") {
		t.Fatalf("warnings %+v, want one naming the hooks passed over", warned)
	}
	c.Blockers(t.Context())
	if len(warned) != 2 {
		t.Fatalf("warnings %+v, want the bound told once", warned)
	}

	// Removed, and added again: a new wait with a bound of its own.
	saved := node.Annotations
	node.Annotations = nil
	if b := c.Blockers(t.Context()); len(b) != 0 {
		t.Fatalf("removed: %v", b)
	}
	node.Annotations = saved
	if b := c.Blockers(t.Context()); len(b) != 1 {
		t.Fatalf("added again: %v, want them to hold afresh", b)
	}
}

func TestPreDrainCheckFailsClosed(t *testing.T) {
	c := &PreDrainCheck{Node: func() (*corev1.Node, error) { return nil, errors.New("not synced") },
		Clock: clocktesting.NewFakeClock(time.Now()), Bound: time.Minute}
	if b := c.Blockers(t.Context()); len(b) != 1 || !strings.Contains(b[0].Name, "not synced") {
		t.Fatalf("blockers %+v, want the read error to hold", b)
	}
}

// A drain that has begun is not held: it resumes.
func TestPreDrainCheckLetsABegunDrainGo(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{PreDrain.Prefix() + "late": "added mid-drain"}}}
	begun := false
	c := &PreDrainCheck{Node: func() (*corev1.Node, error) { return node, nil }, Clock: clocktesting.NewFakeClock(time.Now()),
		Bound: time.Minute, Begun: func(*corev1.Node) bool { return begun }}
	if b := c.Blockers(t.Context()); len(b) != 1 {
		t.Fatalf("not begun: %v, want the hook to hold", b)
	}
	begun = true
	if b := c.Blockers(t.Context()); len(b) != 0 {
		t.Fatalf("begun: %v, want nothing to hold", b)
	}
}
