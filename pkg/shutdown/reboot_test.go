package shutdown

import (
	"context"
	"errors"
	"testing"
)

// rebootLogind is a fakeLogind whose Reboot answers err.
type rebootLogind struct {
	*fakeLogind
	reboots int
	err     error
}

func (r *rebootLogind) Reboot(context.Context) error { r.reboots++; return r.err }

func TestLogindRebooter(t *testing.T) {
	refused := errors.New("Interactive authentication required")
	for _, tt := range []struct {
		name       string
		connectErr error
		rebootErr  error
		wantErr    error
	}{
		{name: "reboots"},
		{name: "logind refuses", rebootErr: refused, wantErr: refused},
		{name: "no logind", connectErr: ErrNoSystemBus, wantErr: ErrNoSystemBus},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &rebootLogind{fakeLogind: newFakeLogind(t, 0), err: tt.rebootErr}
			r := LogindRebooter{Connect: func(context.Context) (Logind, error) {
				if tt.connectErr != nil {
					return nil, tt.connectErr
				}
				return l, nil
			}}
			err := r.Reboot(context.Background())
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Reboot: %v, want %v", err, tt.wantErr)
			}
			if tt.connectErr == nil && (l.reboots != 1 || !l.isClosed()) {
				t.Errorf("reboots %d closed %v: want one request on a connection closed after it", l.reboots, l.isClosed())
			}
		})
	}
}
