package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often WaitFor calls its condition.
const PollInterval = 100 * time.Millisecond

// Poll calls cond at once and then every interval until cond reports done,
// cond returns an error made by StopPolling, or ctx ends; ctx is the only
// bound, so bound it with context.WithTimeout for a deadline.
//
// An error from cond means "not yet": Poll keeps polling and keeps the
// latest one for its own error, so a cond may return an error just to say
// what it saw. Only an error wrapped by StopPolling ends the polling early.
// done is ignored when err is not nil.
//
// Poll's error names what, and how long it waited and the last error from
// cond when ctx ended; it wraps both ctx's error and that last error.
func Poll(ctx context.Context, interval time.Duration, what string, cond func() (done bool, err error)) error {
	began := time.Now()
	var last error
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		done, err := cond()
		if _, ok := errors.AsType[*stopError](err); ok {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if err != nil {
			last = err
		} else if done {
			return nil
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			waited := time.Since(began).Round(time.Millisecond)
			if last == nil {
				return fmt.Errorf("waiting for %s: gave up after %s: %w", what, waited, context.Cause(ctx))
			}
			return fmt.Errorf("waiting for %s: gave up after %s: %w; last error: %w", what, waited, context.Cause(ctx), last)
		case <-timer.C:
		}
	}
}

// StopPolling wraps err so that Poll returns it at once, for a condition
// that can no longer come true (a process that exited, say).
func StopPolling(err error) error {
	return &stopError{err}
}

type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

// WaitFor polls cond every PollInterval for up to timeout, as Poll does,
// and fails the test with Poll's error when it does not come true. Only
// timeout bounds it, not the test's context, so it works in a Cleanup too.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() (done bool, err error)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Poll(ctx, PollInterval, what, cond); err != nil {
		tb.Fatal(err)
	}
}
