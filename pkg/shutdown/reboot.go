package shutdown

import (
	"context"
	"fmt"
)

// LogindRebooter asks logind to reboot the host (the reboot controller's
// Rebooter). Each request has a connection of its own, closed afterwards:
// the Guard's connection holds the delay lock and is replaced whenever the
// bus or logind goes away, so it is no handle to keep for a call made once.
type LogindRebooter struct {
	// Connect opens a connection to logind; usually
	// func(ctx) { return shutdown.Connect(ctx, cfg.Shutdown.SystemBusAddress) }.
	Connect func(ctx context.Context) (Logind, error)
}

// Reboot asks logind to reboot the host now. An error means no reboot was
// started (Logind.Reboot).
func (r LogindRebooter) Reboot(ctx context.Context) error {
	l, err := r.Connect(ctx)
	if err != nil {
		return fmt.Errorf("connecting to systemd-logind to reboot: %w", err)
	}
	defer l.Close()
	return l.Reboot(ctx)
}
