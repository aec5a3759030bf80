package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCallWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	_, err := callWithContext(ctx, "GetCapabilities", func() (string, error) {
		<-release
		return "", nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "GetCapabilities") {
		t.Errorf("err = %v", err)
	}
	v, err := callWithContext(context.Background(), "x", func() (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Errorf("got %v, %v", v, err)
	}
}
