//go:build !linux

package shutdown

import (
	"context"
	"fmt"
	"runtime"
)

// Connect reports ErrNotSupported: systemd-logind exists only on Linux.
func Connect(_ context.Context, address string) (Logind, error) {
	return nil, fmt.Errorf("connecting to logind at %s on %s: %w", address, runtime.GOOS, ErrNotSupported)
}
