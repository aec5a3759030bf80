package kube

import (
	"context"
	"errors"
	"testing"
)

func TestWaitForSync(t *testing.T) {
	calls := 0
	if err := WaitForSync(context.Background(), func() (bool, error) { calls++; return calls == 3, nil }); err != nil || calls != 3 {
		t.Errorf("WaitForSync: %v after %d calls; want nil after 3", err, calls)
	}
	refused := errors.New("refused")
	if err := WaitForSync(context.Background(), func() (bool, error) { return false, refused }); !errors.Is(err, refused) {
		t.Errorf("WaitForSync: %v; want the condition's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitForSync(ctx, func() (bool, error) { return false, nil }); err == nil {
		t.Error("WaitForSync with an ended context returned nil")
	}
}
