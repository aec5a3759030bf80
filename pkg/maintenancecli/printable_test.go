package maintenancecli

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/node-agent/node-agent/pkg/maintenance"
	"github.com/node-agent/node-agent/pkg/reboot"
	"github.com/node-agent/node-agent/pkg/selfdrain"
	"github.com/node-agent/node-agent/pkg/selfdrain/podselect"
)

func TestPrintable(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "evicting vm/a: PodDisruptionBudget vm/pdb", "evicting vm/a: PodDisruptionBudget vm/pdb"},
		{"letters of every script", "Wartung: Lüfter tauschen, 交換, τέλος 🙂", "Wartung: Lüfter tauschen, 交換, τέλος 🙂"},
		{"empty", "", ""},
		{"line feed", "a\nb", `a\nb`},
		{"carriage return", "a\rb", `a\rb`},
		{"tab", "a\tb", `a\tb`},
		{"ANSI clear screen and colour", "\x1b[2J\x1b[31mred", `\x1b[2J\x1b[31mred`},
		{"OSC sets the title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"NUL, DEL and form feed", "\x00\x7f\f", `\x00\x7f\x0c`},
		{"C1 CSI", "\u009b2J", `\u009b2J`},
		{"NEL", "a\u0085b", `a\u0085b`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"bidi isolates", "\u2066x\u2069", `\u2066x\u2069`},
		{"zero width space and joiner", "a\u200bb\u200dc", `a\u200bb\u200dc`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"no-break space", "a\u00a0b", `a\u00a0b`},
		{"tag character beyond the BMP", "a\U000e0001", `a\U000e0001`},
		{"bytes that are not UTF-8", "a\xff\x9bb", `a\xff\x9bb`},
		{"a backslash reads one way only", `C:\x1b`, `C:\\x1b`},
		{"the replacement character passes", "a\ufffdb", "a\ufffdb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := printable(tt.in); got != tt.want {
				t.Errorf("printable(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// forged are texts someone who can write a Node's annotations, its
// conditions or a NodeMaintenance object might put there: one draws a row
// for another node, one clears the screen and colours what follows, one
// hides behind a bidi override, one rewinds the line.
var forged = []string{
	"evicting vm/a\nnode-9  yes       Done                 -      -            forged row",
	"\x1b[2J\x1b[H\x1b[31mall nodes drained\x1b[0m",
	"ok \u202eenod sdrawkcab",
	"kernel\rnode-8  no  NotNeeded",
	"tab\tseparated\tcells\u009b2J\f",
}

// checkTerminalSafe fails when out holds a control character other than
// the line feeds that end its lines, a bidi control, or a line more than
// lines allows.
func checkTerminalSafe(t *testing.T, out string, lines int) {
	t.Helper()
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			t.Errorf("output holds %U at byte %d:\n%s", r, i, out)
			return
		}
	}
	if got := strings.Count(out, "\n"); got != lines {
		t.Errorf("output has %d lines, want %d (one row per node):\n%s", got, lines, out)
	}
}

// Every table the CLI prints from the cluster shows a forged text escaped,
// in one row per node.
func TestTablesShowForgedTextEscaped(t *testing.T) {
	t.Run("maintenance status", func(t *testing.T) {
		var nodes []corev1.Node
		for i, f := range forged {
			st := &selfdrain.Status{Phase: selfdrain.PhaseRunning, Trigger: selfdrain.TriggerAnnotation, Reason: f,
				LastError: f, PendingPods: []string{f}, StartTime: ptrTime(t0), PodAccess: f}
			nodes = append(nodes, *node("node-"+string(rune('1'+i)), "1", f, st))
		}
		var b bytes.Buffer
		if err := writeStatusTable(&b, nodes, false); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, b.String(), 1+len(forged))
		if !strings.Contains(b.String(), `evicting vm/a\nnode-9  yes`) {
			t.Errorf("the forged row is not shown escaped:\n%s", b.String())
		}

		// One node adds its pending pods, pod access and reboot lines.
		one := nodes[0]
		one.Annotations[reboot.RequestAnnotation] = forged[1]
		one.Annotations[reboot.RecordAnnotation] = (&reboot.Record{State: reboot.Pending, Reason: forged[2], Message: forged[3]}).Encode()
		b.Reset()
		if err := writeStatusTable(&b, []corev1.Node{one}, true); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, b.String(), 2+1+3)
	})
	t.Run("maintenance status of an unreadable record", func(t *testing.T) {
		n := node("node-1", "1", "x", nil)
		n.Annotations[selfdrain.StatusAnnotation] = `{"phase":"` + forged[1] + `"}`
		var b bytes.Buffer
		if err := writeStatusTable(&b, []corev1.Node{*n}, false); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, b.String(), 2)
	})
	t.Run("reboot status", func(t *testing.T) {
		var nodes []corev1.Node
		for i, f := range forged {
			n := rebootNode("node-"+string(rune('1'+i)), &reboot.Record{State: reboot.Pending, Reason: f, Message: f, Since: ptrTime(t0)}, corev1.ConditionTrue)
			n.Annotations[reboot.RequestAnnotation] = f
			nodes = append(nodes, *n)
		}
		for _, whole := range []bool{false, true} {
			var b bytes.Buffer
			if err := writeRebootTable(&b, nodes, whole, t0); err != nil {
				t.Fatal(err)
			}
			checkTerminalSafe(t, b.String(), 1+len(forged))
		}
	})
	t.Run("NodeMaintenance objects", func(t *testing.T) {
		var objs []*maintenance.NodeMaintenance
		for _, f := range forged {
			objs = append(objs, &maintenance.NodeMaintenance{
				TypeMeta:   metav1.TypeMeta{APIVersion: medik8s + "/v1beta1", Kind: maintenance.NodeMaintenanceKind},
				ObjectMeta: metav1.ObjectMeta{Name: "nm"},
				Spec:       maintenance.NodeMaintenanceSpec{NodeName: f, Reason: f},
				Status:     maintenance.NodeMaintenanceStatus{Phase: selfdrain.Phase(f), LastError: f},
			})
		}
		var b bytes.Buffer
		if err := writeNodeMaintenanceTable(&b, objs, map[string]bool{}); err != nil {
			t.Fatal(err)
		}
		checkTerminalSafe(t, b.String(), 1+len(forged))
	})
	t.Run("dry run", func(t *testing.T) {
		var plan []podselect.PlannedPod
		for _, f := range forged {
			plan = append(plan, podselect.PlannedPod{Pod: f, Action: "evict", Why: f}, podselect.PlannedPod{Pod: "ns/p", Action: "evict", Blockers: []string{f}})
		}
		var b bytes.Buffer
		if err := writePlan(&b, "node-1", false, plan); err != nil {
			t.Fatal(err)
		}
		// Three lines of intent, a blank line, the header, the rows, a
		// blank line and the counts.
		checkTerminalSafe(t, b.String(), 3+1+1+len(plan)+2)
	})
	t.Run("progress line", func(t *testing.T) {
		for _, f := range forged {
			line := statusLine(&selfdrain.Status{Phase: selfdrain.PhaseRunning, EvictionPods: 2, LastError: f})
			checkTerminalSafe(t, line+"\n", 1)
		}
	})
}

// FuzzPrintable: whatever the cluster holds, what printable returns is one
// line of printable characters, and text without anything to escape comes
// back as it was.
func FuzzPrintable(f *testing.F) {
	for _, s := range append([]string{"", "plain", `back\slash`, "\xff", "\ufffd"}, forged...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := printable(s)
		for _, r := range got {
			if r == utf8.RuneError || !unicode.IsPrint(r) {
				if r == utf8.RuneError && strings.Contains(s, "\ufffd") {
					continue
				}
				t.Fatalf("printable(%q) = %q holds %U", s, got, r)
			}
		}
	})
}
