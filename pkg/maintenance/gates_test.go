package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/node-agent/node-agent/pkg/reboot"
)

type fakeGates struct{ holds chan []reboot.Blocker }

func (f fakeGates) Blockers(context.Context) []reboot.Blocker { return <-f.holds }

type gateSlots struct{ asked chan struct{} }

// after passes g, then stands for the slot's request: asked is closed
// once the gates let the drain go on.
func (f gateSlots) after(ctx context.Context, g *Gates, onWait func(error)) error {
	if err := g.Wait(ctx, onWait); err != nil {
		return err
	}
	close(f.asked)
	return nil
}

// TestGates: no slot is asked for while a gate holds; the drain is told
// why it waits (a WaitReason, not an error), and the gates are asked again
// every interval.
func TestGates(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	gates := fakeGates{holds: make(chan []reboot.Blocker)}
	slots := gateSlots{asked: make(chan struct{})}
	waits := make(chan error, 4)
	done := make(chan error)
	go func() {
		err := slots.after(t.Context(), &Gates{Checks: []Check{{What: "maintenance gates", Checker: gates}}, Interval: 30 * time.Second, Clock: clk, Bound: GateBound{}}, func(err error) { waits <- err })
		done <- err
	}()
	gates.holds <- []reboot.Blocker{{Kind: reboot.BlockerGate, Name: "healthy (up == 0) has 1 series: {} 0"}}
	err := <-waits
	var wr WaitReason
	if !errors.As(err, &wr) || wr.WaitReason() != "waiting for maintenance gates: healthy (up == 0) has 1 series: {} 0" {
		t.Fatalf("onWait(%v), want a WaitReason naming the gate", err)
	}
	select {
	case <-slots.asked:
		t.Fatal("a slot was asked for while a gate held")
	default:
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(30 * time.Second)
	gates.holds <- nil
	<-slots.asked
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGateBoundDecision: the checks hold a maintenance until
// maintenance.gateBound from its first wait, then onGateBound decides.
func TestGateBoundDecision(t *testing.T) {
	since := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	hour := GateBound{After: time.Hour}
	tests := []struct {
		name  string
		now   time.Time
		bound GateBound
		want  string
	}{
		{"no bound holds for ever", since.Add(1000 * time.Hour), GateBound{}, ""},
		{"within the bound", since.Add(time.Hour - time.Second), hour, ""},
		{"at the bound, wait", since.Add(time.Hour), hour, GateBoundWait},
		{"past the bound, proceed", since.Add(2 * time.Hour), GateBound{After: time.Hour, Proceed: true}, GateBoundProceed},
		{"a first wait in the future counts as now", since.Add(-time.Minute), hour, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GateBoundDecision(since, tt.now, tt.bound); got != tt.want {
				t.Errorf("GateBoundDecision = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestGatesBound: a check that never lets go holds the maintenance
// until the bound; then wait keeps it waiting with a reason that says so,
// and proceed asks for the slot with the check still holding. Exceeded is
// told once, with the decision and what held it.
func TestGatesBound(t *testing.T) {
	for _, proceed := range []bool{false, true} {
		t.Run(fmt.Sprintf("proceed=%v", proceed), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))
			gates := fakeGates{holds: make(chan []reboot.Blocker)}
			slots := gateSlots{asked: make(chan struct{})}
			waits := make(chan string, 8)
			var exceeded []string
			held := make(chan bool, 8)
			bound := GateBound{After: time.Minute, Proceed: proceed,
				Exceeded: func(decision, message string) { exceeded = append(exceeded, decision+": "+message) },
				Held:     func(h bool) { held <- h }}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				err := slots.after(ctx, &Gates{Checks: []Check{{What: VMGateWhat, Checker: gates}}, Interval: 30 * time.Second, Clock: clk, Bound: bound}, func(err error) { waits <- err.Error() })
				done <- err
			}()
			vm := []reboot.Blocker{{Kind: reboot.BlockerVM, Name: "tenant/db (stopped: evictionStrategy None)"}}
			step := func() {
				for !clk.HasWaiters() {
					time.Sleep(time.Millisecond)
				}
				clk.Step(30 * time.Second)
			}
			gates.holds <- vm
			if w := <-waits; strings.Contains(w, "gateBound") {
				t.Fatalf("first wait %q already past the bound", w)
			}
			step()
			gates.holds <- vm
			<-waits
			step()
			gates.holds <- vm // a minute after the first wait: the bound ran out
			if proceed {
				<-slots.asked
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else {
				w := <-waits
				if !strings.Contains(w, "tenant/db") || !strings.Contains(w, "maintenance.onGateBound=wait") {
					t.Errorf("wait past the bound %q, want the VM and the decision", w)
				}
				if h := <-held; !h {
					t.Error("Held(false) past the bound, want true")
				}
				step()
				gates.holds <- vm
				<-waits
				select {
				case <-slots.asked:
					t.Fatal("a slot was asked for past the bound with onGateBound wait")
				default:
				}
				cancel()
				<-done
			}
			want := GateBoundWait
			if proceed {
				want = GateBoundProceed
			}
			if len(exceeded) != 1 || !strings.HasPrefix(exceeded[0], want+": ") || !strings.Contains(exceeded[0], "tenant/db") {
				t.Errorf("Exceeded told %q, want once %s naming the VM", exceeded, want)
			}
		})
	}
}

// TestNextCheck: the checks are asked again after the interval, or when
// maintenance.gateBound runs out if that comes first, so the bound's
// decision is not taken up to an interval late.
func TestNextCheck(t *testing.T) {
	since := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	const interval = 30 * time.Second
	for _, c := range []struct {
		name  string
		at    time.Duration // now - since
		bound time.Duration
		want  time.Duration
	}{
		{"no bound", 0, 0, interval},
		{"bound beyond the interval", 0, time.Minute, interval},
		{"bound within the interval", 0, 3 * time.Second, 3 * time.Second},
		{"bound within the next interval", 40 * time.Second, 45 * time.Second, 5 * time.Second},
		{"bound passed", 50 * time.Second, 45 * time.Second, interval},
		{"bound exactly now", 45 * time.Second, 45 * time.Second, interval},
		{"clock set back", -time.Minute, 45 * time.Second, interval},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := nextCheck(since, since.Add(c.at), interval, GateBound{After: c.bound}); got != c.want {
				t.Errorf("nextCheck = %s, want %s", got, c.want)
			}
		})
	}
}
