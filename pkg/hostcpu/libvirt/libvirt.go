// Package libvirt owns the cgo binding to libvirt: it implements
// hostcpu.Conn with the few libvirt calls discovery makes, loading
// libvirt.so.0 with dlopen at the first Dial (binding.go). It is the only package of node-agent that loads
// libvirt.so.0, so that the parsers and policy in pkg/hostcpu and
// pkg/labeller build and test with CGO_ENABLED=0, and so that a process that
// never dials (the daemon, which discovers in a child process) never maps
// libvirt's libraries.
package libvirt

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu"
)

// libvirt's default event loop is process-wide state inside the C library. It
// must be registered once, before the first connection, and a goroutine must
// keep running it, or the embedded QEMU driver (qemu:///embed) cannot talk to
// the QEMU it probes. This Once mirrors that process-wide fact; a second
// registration would add a second wake-up pipe to the same loop.
var eventLoop struct {
	once sync.Once
	err  error
}

func startEventLoop(log *slog.Logger) error {
	eventLoop.once.Do(func() {
		if err := load(); err != nil {
			eventLoop.err = err
			return
		}
		if err := eventRegisterDefaultImpl(); err != nil {
			eventLoop.err = fmt.Errorf("starting libvirt's event loop: %w", err)
			return
		}
		go func() {
			for {
				if err := eventRunDefaultImpl(); err != nil {
					// It fails only on a broken poll(2); keep
					// serving, but do not spin.
					log.Error("libvirt event loop iteration failed", "err", err)
					time.Sleep(time.Second)
				}
			}
		}()
	})
	return eventLoop.err
}

// Dial opens a libvirt connection. It loads libvirt.so.0 at the first call and
// returns an error, not a crash, where libvirt is not installed. log receives the event
// loop's errors.
func Dial(log *slog.Logger) hostcpu.DialFunc {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, uri string) (hostcpu.Conn, error) {
		if err := startEventLoop(log); err != nil {
			return nil, err
		}
		type result struct {
			c   *conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			c, err := openConn(uri)
			ch <- result{c, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			return &libvirtConn{c: r.c}, nil
		case <-ctx.Done():
			// Close the connection if it opens after all.
			go func() {
				if r := <-ch; r.c != nil {
					_ = r.c.close()
				}
			}()
			return nil, fmt.Errorf("connecting to %s: gave up waiting: %w", uri, ctx.Err())
		}
	}
}

type libvirtConn struct {
	c *conn
}

func (l *libvirtConn) DomainCapabilities(ctx context.Context, virtType string) (string, error) {
	// No emulator, arch and machine ask libvirt for the host's defaults,
	// as virsh does without --emulatorbin, --arch and --machine.
	return callWithContext(ctx, "GetDomainCapabilities", func() (string, error) {
		return l.c.domainCapabilities(virtType)
	})
}

func (l *libvirtConn) Capabilities(ctx context.Context) (string, error) {
	return callWithContext(ctx, "GetCapabilities", l.c.capabilities)
}

func (l *libvirtConn) ExpandCPU(ctx context.Context, virtType, cpuXML string) (string, error) {
	return callWithContext(ctx, "BaselineHypervisorCPU", func() (string, error) {
		return l.c.expandCPU(virtType, cpuXML)
	})
}

func (l *libvirtConn) Close() error {
	return l.c.close()
}

// callWithContext runs f, a blocking libvirt call, and stops waiting for it
// when ctx ends. libvirt calls cannot be interrupted, so a hung call's
// goroutine stays behind; the caller gets the context's error at once.
func callWithContext[T any](ctx context.Context, what string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("libvirt %s: gave up waiting: %w", what, ctx.Err())
	}
}
