// Package libvirt owns node-agent's use of libvirt: it implements hostcpu.Conn
// over libvirt.org/go/libvirt with the few calls discovery makes. It is the
// only package of node-agent that imports the binding, and only the discovery
// helper (cmd/node-agent-discover) imports it, so that the parsers and policy
// in pkg/hostcpu and pkg/labeller build and test with CGO_ENABLED=0, and the
// daemon (cmd/node-agent) links and maps none of libvirt.
//
// Built with -tags libvirt_dlopen (as `make build` does), the binding loads
// libvirt.so.0 with dlopen at its first call instead of linking it, so the
// helper needs no libvirt headers to build and still runs, answering "libvirt
// unreachable", where libvirt is not installed.
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	golibvirt "libvirt.org/go/libvirt"

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
		if err := golibvirt.EventRegisterDefaultImpl(); err != nil {
			eventLoop.err = fmt.Errorf("starting libvirt's event loop: %w", plainError(err))
			return
		}
		go func() {
			for {
				if err := golibvirt.EventRunDefaultImpl(); err != nil {
					// It fails only on a broken poll(2); keep
					// serving, but do not spin.
					log.Error("libvirt event loop iteration failed", "err", plainError(err))
					time.Sleep(time.Second)
				}
			}
		}()
	})
	return eventLoop.err
}

// Dial opens a libvirt connection. Where libvirt is not installed it returns
// an error, not a crash. log receives the event loop's errors.
func Dial(log *slog.Logger) hostcpu.DialFunc {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, uri string) (hostcpu.Conn, error) {
		if err := startEventLoop(log); err != nil {
			return nil, err
		}
		type result struct {
			c   *golibvirt.Connect
			err error
		}
		ch := make(chan result, 1)
		go func() {
			c, err := golibvirt.NewConnect(uri)
			ch <- result{c, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, plainError(r.err)
			}
			return &libvirtConn{c: r.c}, nil
		case <-ctx.Done():
			// Close the connection if it opens after all.
			go func() {
				if r := <-ch; r.c != nil {
					_, _ = r.c.Close()
				}
			}()
			return nil, fmt.Errorf("connecting to %s: gave up waiting: %w", uri, ctx.Err())
		}
	}
}

type libvirtConn struct {
	c *golibvirt.Connect
}

func (l *libvirtConn) LibVersion(ctx context.Context) (uint64, error) {
	v, err := callWithContext(ctx, "GetLibVersion", l.c.GetLibVersion)
	return uint64(v), err
}

func (l *libvirtConn) DomainCapabilities(ctx context.Context, t hostcpu.Target, f hostcpu.DomCapsFlags) (string, error) {
	// No emulator asks for the default one of t.Arch, as virsh does
	// without --emulatorbin.
	var flags golibvirt.ConnectGetDomainCapabilitiesFlags
	if f.ExpandCPUFeatures {
		flags |= golibvirt.DOMAIN_CAPABILITIES_EXPAND_CPU_FEATURES
	}
	if f.SupportedCPUFeatures {
		flags |= golibvirt.DOMAIN_CAPABILITIES_SUPPORTED_CPU_FEATURES
	}
	return callWithContext(ctx, "GetDomainCapabilities", func() (string, error) {
		return l.c.GetDomainCapabilities("", t.Arch, t.Machine, t.VirtType, flags)
	})
}

func (l *libvirtConn) Capabilities(ctx context.Context) (string, error) {
	return callWithContext(ctx, "GetCapabilities", l.c.GetCapabilities)
}

func (l *libvirtConn) ExpandCPU(ctx context.Context, t hostcpu.Target, cpuXML string) (string, error) {
	return callWithContext(ctx, "BaselineHypervisorCPU", func() (string, error) {
		return l.c.BaselineHypervisorCPU("", t.Arch, t.Machine, t.VirtType, []string{cpuXML}, golibvirt.CONNECT_BASELINE_CPU_EXPAND_FEATURES)
	})
}

func (l *libvirtConn) Close() error {
	_, err := l.c.Close()
	return plainError(err)
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
		ch <- result{v, plainError(err)}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("libvirt %s: gave up waiting: %w", what, ctx.Err())
	}
}

// plainError keeps libvirt's own message, which is what virsh prints, and
// drops the binding's "virError(Code=..., Domain=..., Message='...')"
// wrapping: the message ends up in label reports and Events. Where the
// dlopen build could not load the library, it says what to install.
func plainError(err error) error {
	var lerr golibvirt.Error
	if !errors.As(err, &lerr) || lerr.Message == "" {
		return err
	}
	msg := lerr.Message
	if strings.Contains(msg, "libvirt.so.0") {
		msg += "; is libvirt (libvirt.so.0, Debian package libvirt0) installed?"
	}
	return errors.New(msg)
}
