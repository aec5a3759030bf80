package libvirt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
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

func TestCleanLibvirtError(t *testing.T) {
	err := cleanLibvirtError(libvirt.Error{Code: 38, Domain: 7, Message: "Failed to connect socket"})
	if err.Error() != "Failed to connect socket" {
		t.Errorf("got %q", err)
	}
	if cleanLibvirtError(nil) != nil {
		t.Error("nil became an error")
	}
}
