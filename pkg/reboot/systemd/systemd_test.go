package systemd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// fakeConn stands in for systemd: it records the calls and answers the
// start job with job, and the properties with props.
type fakeConn struct {
	startErr error
	job      string // "" leaves the job unfinished
	props    map[string]any
	resetErr error

	started  []sddbus.Property
	unit     string
	stopped  bool
	stopCtx  error // the ctx's error when StopUnit was called
	reset    bool
	closed   bool
	startCtx context.Context
}

func (f *fakeConn) StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.unit, f.started, f.startCtx = name, props, ctx
	if mode != "fail" {
		return 0, errors.New("mode " + mode)
	}
	if f.startErr != nil {
		return 0, f.startErr
	}
	if f.job != "" {
		ch <- f.job
	}
	return 1, nil
}

func (f *fakeConn) GetServicePropertyContext(_ context.Context, service, property string) (*sddbus.Property, error) {
	if service != f.unit {
		return nil, errors.New("no such unit " + service)
	}
	v, ok := f.props[property]
	if !ok {
		return nil, errors.New("no property " + property)
	}
	return &sddbus.Property{Name: property, Value: dbus.MakeVariant(v)}, nil
}

func (f *fakeConn) StopUnitContext(ctx context.Context, name, _ string, ch chan<- string) (int, error) {
	if name != f.unit {
		return 0, errors.New("stopping another unit: " + name)
	}
	f.stopped, f.stopCtx = true, ctx.Err()
	ch <- "done"
	return 2, nil
}

func (f *fakeConn) ResetFailedUnitContext(_ context.Context, name string) error {
	if name != f.unit {
		return errors.New("resetting another unit: " + name)
	}
	f.reset = true
	return f.resetErr
}

func (f *fakeConn) Close() { f.closed = true }

func runner(f *fakeConn, log *bytes.Buffer) *Runner {
	return &Runner{
		Dial:     func(context.Context) (Conn, error) { return f, nil },
		Timeout:  30 * time.Second,
		UnitName: func() string { return "node-agent-sentinel-test.service" },
		Logger:   slog.New(slog.NewTextHandler(log, nil)),
	}
}

var argv = []string{"/usr/bin/needs-restarting", "-r"}

func TestRunnerReadsTheExitStatus(t *testing.T) {
	noSuch := dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit node-agent-sentinel-test.service not loaded."}}
	tests := []struct {
		name       string
		conn       *fakeConn
		want       int
		wantErr    string
		wantLog    string
		wantNoStop bool
	}{
		{name: "exit 0", conn: &fakeConn{job: "done", props: map[string]any{"Result": "success", "ExecMainStatus": int32(0)}, resetErr: noSuch}, want: 0},
		{name: "exit 1", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": int32(1)}}, want: 1},
		{name: "exit 7", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": int32(7)}}, want: 7},
		{name: "timed out", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "timeout", "ExecMainStatus": int32(9)}}, wantErr: "killed after 30s"},
		{name: "killed by a signal", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "signal", "ExecMainStatus": int32(9)}}, wantErr: "job failed, result signal; see journalctl -u node-agent-sentinel-test.service"},
		{name: "program missing: systemd's code is not the command's", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": int32(203)}}, wantErr: "systemd could not run the command (exit status 203"},
		{name: "exit 199 is the command's", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": int32(199)}}, want: 199},
		{name: "exit 244 is the command's", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": int32(244)}}, want: 244},
		{name: "status of the wrong type", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": "1"}}, wantErr: "want an int32"},
		{name: "property unreadable", conn: &fakeConn{job: "done", props: map[string]any{}}, wantErr: "reading Result of transient unit node-agent-sentinel-test.service"},
		{name: "start refused", conn: &fakeConn{startErr: errors.New("Access denied")}, wantErr: "starting transient unit node-agent-sentinel-test.service: Access denied", wantNoStop: true},
		{name: "reset fails: logged, status kept", conn: &fakeConn{job: "failed", props: map[string]any{"Result": "exit-code", "ExecMainStatus": int32(1)}, resetErr: errors.New("boom")}, want: 1, wantLog: "could not reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			got, err := runner(tt.conn, &log).Run(context.Background(), argv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if got != tt.want {
				t.Errorf("status = %d, want %d", got, tt.want)
			}
			if tt.conn.stopped == tt.wantNoStop || tt.conn.reset == tt.wantNoStop {
				t.Errorf("stopped %v, reset %v; want both %v", tt.conn.stopped, tt.conn.reset, !tt.wantNoStop)
			}
			if !tt.conn.closed {
				t.Error("connection not closed")
			}
			if tt.wantLog == "" && log.Len() > 0 {
				t.Errorf("unexpected log: %s", log.String())
			}
			if tt.wantLog != "" && !strings.Contains(log.String(), tt.wantLog) {
				t.Errorf("log %q lacks %q", log.String(), tt.wantLog)
			}
		})
	}
}

func TestRunnerUnitProperties(t *testing.T) {
	f := &fakeConn{job: "done", props: map[string]any{"Result": "success"}}
	argv := []string{"/bin/sh", "-c", "test -e $F", "sh", "${HOME}", "$$"}
	sent := []string{"/bin/sh", "-c", "test -e $$F", "sh", "$${HOME}", "$$$$"}
	if _, err := runner(f, &bytes.Buffer{}).Run(context.Background(), argv); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, p := range f.started {
		got[p.Name] = p.Value.Value()
	}
	if got["Type"] != "oneshot" || got["RemainAfterExit"] != true {
		t.Errorf("Type %v, RemainAfterExit %v: want oneshot and true, so the status stays readable", got["Type"], got["RemainAfterExit"])
	}
	if got["TimeoutStartUSec"] != uint64(30_000_000) {
		t.Errorf("TimeoutStartUSec = %v, want 30000000", got["TimeoutStartUSec"])
	}
	// ExecStart is a(sasb): path, argv (with argv[0]), ignore-failure.
	// The arguments' "$" are doubled, as systemd expands them.
	exec := reflect.ValueOf(got["ExecStart"])
	if exec.Kind() != reflect.Slice || exec.Len() != 1 {
		t.Fatalf("ExecStart = %#v", got["ExecStart"])
	}
	e := exec.Index(0)
	if e.Field(0).String() != argv[0] || !reflect.DeepEqual(e.Field(1).Interface(), sent) || e.Field(2).Bool() {
		t.Errorf("ExecStart = %#v, want path %s, argv %q, failures not ignored", e.Interface(), argv[0], sent)
	}
}

// A cancelled wait still stops and resets the unit, with a context that is
// not the cancelled one.
func TestRunnerCleansUpAfterCancel(t *testing.T) {
	f := &fakeConn{props: map[string]any{"Result": "success"}} // the job never ends
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runner(f, &bytes.Buffer{}).Run(ctx, argv)
		done <- err
	}()
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if !f.stopped || !f.reset {
		t.Errorf("stopped %v, reset %v: the unit was left on the host", f.stopped, f.reset)
	}
	if f.stopCtx != nil {
		t.Errorf("StopUnit got a context already done (%v); it would not reach systemd", f.stopCtx)
	}
}

func TestRunnerDialAndEmpty(t *testing.T) {
	r := &Runner{Dial: func(context.Context) (Conn, error) { return nil, errors.New("no bus") }}
	if _, err := r.Run(context.Background(), argv); err == nil || !strings.Contains(err.Error(), "no bus") {
		t.Errorf("error = %v, want the dial's", err)
	}
	if _, err := r.Run(context.Background(), nil); err == nil {
		t.Error("an empty command ran")
	}
}

func TestRandomUnitNames(t *testing.T) {
	r := &Runner{}
	a, b := r.unitName(), r.unitName()
	if a == b || !strings.HasPrefix(a, "node-agent-sentinel-") || !strings.HasSuffix(a, ".service") {
		t.Errorf("unit names %q, %q: want distinct node-agent-sentinel-*.service", a, b)
	}
}
