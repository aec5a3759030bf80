package maintenancecli

import (
	"bytes"
	"testing"

	"github.com/node-agent/node-agent/pkg/selfdrain"
)

func TestStatusLine(t *testing.T) {
	tests := []struct {
		name string
		st   selfdrain.Status
		want string
	}{
		{
			name: "listing pods",
			st:   selfdrain.Status{Phase: selfdrain.PhaseRunning},
			want: "[..............................] cordoned, listing pods",
		},
		{
			name: "half way, blocked",
			st:   selfdrain.Status{Phase: selfdrain.PhaseRunning, EvictionPods: 4, PendingPods: []string{"a", "b"}, DrainProgress: 50, LastError: "PodDisruptionBudget vm/pdb"},
			want: "[###############...............]  50%  Running  2/4 pods left  blocker: PodDisruptionBudget vm/pdb",
		},
		{
			name: "waiting for a slot",
			st:   selfdrain.Status{Phase: selfdrain.PhaseWaiting, LastError: "2 of 2 drain slots taken"},
			want: "[..............................]   0%  Waiting  0/0 pods left  blocker: 2 of 2 drain slots taken",
		},
		{
			name: "done",
			st:   selfdrain.Status{Phase: selfdrain.PhaseSucceeded, EvictionPods: 3, DrainProgress: 100},
			want: "[##############################] 100%  Succeeded  0/3 pods left",
		},
		{
			// A hand-edited annotation must not make the bar panic.
			name: "progress out of range",
			st:   selfdrain.Status{Phase: selfdrain.PhaseRunning, EvictionPods: 1, DrainProgress: 250},
			want: "[##############################] 250%  Running  0/1 pods left",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := statusLine(&tt.st); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestProgressOutput: elsewhere than on a terminal each new line is printed
// once; on a terminal the line is redrawn in place and ended at done.
func TestProgressOutput(t *testing.T) {
	run := func(tty bool) string {
		var b bytes.Buffer
		p := &progress{out: &b, tty: tty}
		p.show("waiting")
		p.show("waiting")
		p.status(&selfdrain.Status{Phase: selfdrain.PhaseRunning})
		p.status(&selfdrain.Status{Phase: selfdrain.PhaseRunning})
		p.done()
		return b.String()
	}
	if got, want := run(false), "waiting\n[..............................] cordoned, listing pods\n"; got != want {
		t.Errorf("not a terminal: got %q, want %q", got, want)
	}
	if got, want := run(true), "\r\x1b[Kwaiting\r\x1b[K[..............................] cordoned, listing pods\n"; got != want {
		t.Errorf("terminal: got %q, want %q", got, want)
	}
	var b bytes.Buffer
	(&progress{out: &b, tty: true}).done()
	if b.Len() != 0 {
		t.Errorf("done with nothing shown wrote %q", b.String())
	}
	if newProgress(&b).tty {
		t.Error("a buffer taken for a terminal")
	}
}
