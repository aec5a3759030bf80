package memrelease

import (
	"context"
	"log/slog"
	"runtime/debug"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestCleanReadOnlyMappings(t *testing.T) {
	const smaps = `00400000-01100000 r-xp 00000000 fd:01 123 /usr/bin/node-agent
Size:              13312 kB
Rss:                9980 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
01100000-01ec0000 r--p 00d00000 fd:01 123 /usr/bin/node-agent
Rss:               10432 kB
Anonymous:             0 kB
01ec0000-01f57000 rw-p 01ac0000 fd:01 123 /usr/bin/node-agent
Anonymous:           540 kB
01f57000-01f58000 r--p 01b57000 fd:01 123 /usr/bin/node-agent
Anonymous:             4 kB
01f57000-03f9f000 rw-p 00000000 00:00 0
Anonymous:           120 kB
7f4b361b2000-7f4b36308000 r-xp 00028000 fd:01 456                        /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f00000000-7f00001000 r--p 00000000 fd:01 789                        /tmp/a dir/node-agent (deleted)
Anonymous:             0 kB
7fff43b51000-7fff43b72000 rw-p 00000000 00:00 0                          [stack]
Anonymous:            16 kB
`
	tests := []struct {
		file string
		want []addrRange
	}{
		// Not the writable mapping, nor the read-only one with a written page.
		{"/usr/bin/node-agent", []addrRange{{0x400000, 0x1100000}, {0x1100000, 0x1ec0000}}},
		{"/tmp/a dir/node-agent", []addrRange{{0x7f00000000, 0x7f00001000}}},
		{"/usr/bin/other", nil},
	}
	for _, tt := range tests {
		got := cleanReadOnlyMappings(smaps, tt.file)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %v, want %v", tt.file, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: range %d is %v, want %v", tt.file, i, got[i], tt.want[i])
			}
		}
	}
}

func TestEnabled(t *testing.T) {
	for v, want := range map[string]bool{"": true, "true": true, "1": true, "false": false, "0": false, "no": true} {
		if got := Enabled(func(string) string { return v }); got != want {
			t.Errorf("%s=%q: enabled %t, want %t", DisableEnv, v, got, want)
		}
	}
}

// Run waits for its delay on the clock it is given, and releases once.
func TestRunWaitsForDelay(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	r := &Releaser{Delay: time.Minute, Clock: clock, Logger: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	for !clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("Run returned before its delay")
	default:
	}
	clock.Step(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &Releaser{Delay: time.Hour, Clock: clocktesting.NewFakeClock(time.Now()), Logger: slog.New(slog.DiscardHandler)}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSetGCPercentLeavesGOGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	SetGCPercent(func(string) string { return "200" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the GC percent became %d, want it left at 100", got)
	}
	SetGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != GCPercent {
		t.Errorf("without GOGC, the GC percent is %d, want %d", got, GCPercent)
	}
}
