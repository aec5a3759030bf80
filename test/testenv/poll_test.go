package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPollSucceeds(t *testing.T) {
	calls := 0
	err := Poll(t.Context(), time.Millisecond, "the third call", func() (bool, error) {
		calls++
		if calls == 1 {
			return true, errors.New("an error means not yet, even with done")
		}
		return calls == 3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

func TestPollTimeoutNamesTheLastError(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	last := errors.New("2 of 3 Ready")
	err := Poll(ctx, time.Millisecond, "the pods", func() (bool, error) {
		calls++
		if calls == 1 {
			return false, errors.New("an older error")
		}
		if calls == 2 {
			return false, last
		}
		return false, nil // not done, nothing new to say: the last error stays
	})
	if err == nil {
		t.Fatal("Poll returned nil for a condition that never holds")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, last) {
		t.Errorf("Poll's error %q wraps neither the deadline nor the last error", err)
	}
	msg := err.Error()
	for _, want := range []string{"waiting for the pods", "gave up after ", "last error: 2 of 3 Ready"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Poll's error %q does not say %q", msg, want)
		}
	}
	if calls < 3 {
		t.Errorf("cond called %d times before the deadline, want it polled on past the errors", calls)
	}
}

func TestPollStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := Poll(ctx, time.Millisecond, "a cancelled wait", func() (bool, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return false, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll after cancel = %v, want context.Canceled", err)
	}
	if calls != 2 {
		t.Errorf("cond called %d times, want 2: none after the cancel", calls)
	}
	if strings.Contains(err.Error(), "last error") {
		t.Errorf("Poll's error %q names a last error where there was none", err)
	}
}

func TestPollStopPolling(t *testing.T) {
	exited := errors.New("exit status 1")
	calls := 0
	err := Poll(t.Context(), time.Millisecond, "a dead process", func() (bool, error) {
		calls++
		return false, StopPolling(exited)
	})
	if !errors.Is(err, exited) || err.Error() != "waiting for a dead process: exit status 1" {
		t.Errorf("Poll = %v, want %q wrapping it", err, "waiting for a dead process: exit status 1")
	}
	if calls != 1 {
		t.Errorf("cond called %d times, want 1", calls)
	}
}

func TestWaitFor(t *testing.T) {
	calls := 0
	WaitFor(t, time.Minute, "the second call", func() (bool, error) {
		calls++
		return calls == 2, nil
	})
	if calls != 2 {
		t.Errorf("cond called %d times, want 2", calls)
	}
}

// fatalTB records Fatal instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(f)
}

func (f *fatalTB) Helper() {}

func TestWaitForFailsTheTest(t *testing.T) {
	tb := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(tb) {
				panic(r)
			}
		}()
		WaitFor(tb, 20*time.Millisecond, "nothing", func() (bool, error) {
			return false, errors.New("still nothing")
		})
	}()
	if !strings.HasPrefix(tb.msg, "waiting for nothing: gave up after ") || !strings.HasSuffix(tb.msg, "last error: still nothing") {
		t.Errorf("WaitFor failed the test with %q", tb.msg)
	}
}
