package config

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	clocktesting "k8s.io/utils/clock/testing"
)

// The old slot keys still work: read as their new keys, each with one
// deprecation that names the new key.
func TestOldSlotKeysStillWork(t *testing.T) {
	c, ds, err := Parse([]byte(`drain:
  timeout: 30m
  maxConcurrentNodes: 3
  leaseNamespace: slots-here
  slotSilenceBound: 2m
  pools:
    - name: gpu
      selector: gpu=true
      maxConcurrentNodes: 2
    - name: rack-a
      maxUnavailable: "10%"
`), Default())
	if err != nil {
		t.Fatal(err)
	}
	if c.Slots.Limit != 3 || c.Slots.Namespace != "slots-here" || c.Slots.HeartbeatBound.Duration != 2*time.Minute || c.Drain.Timeout.Duration != 30*time.Minute {
		t.Errorf("slots %+v, drain.timeout %s", c.Slots, c.Drain.Timeout.Duration)
	}
	if len(c.Slots.Pools) != 2 || c.Slots.Pools[0].Limit != 2 || c.Slots.Pools[1].MaxUnavailable.String() != "10%" {
		t.Errorf("pools %+v", c.Slots.Pools)
	}
	want := []Deprecation{
		{"drain.maxConcurrentNodes", "slots.limit"},
		{"drain.leaseNamespace", "slots.namespace"},
		{"drain.pools[].maxConcurrentNodes", "slots.pools[].limit"},
		{"drain.pools", "slots.pools"},
		{"drain.slotSilenceBound", "slots.heartbeatBound"},
	}
	if !reflect.DeepEqual(ds, want) {
		t.Errorf("deprecations %v, want %v", ds, want)
	}
	c.NodeName = "n"
	if err := c.Validate(); err != nil {
		t.Error(err)
	}

	// The same file in the new keys reads the same, without a warning.
	niu, nds, err := Parse([]byte(`drain:
  timeout: 30m
slots:
  limit: 3
  namespace: slots-here
  heartbeatBound: 2m
  pools:
    - name: gpu
      selector: gpu=true
      limit: 2
    - name: rack-a
      maxUnavailable: "10%"
`), Default())
	if err != nil || len(nds) != 0 {
		t.Fatalf("new keys: %v, deprecations %v", err, nds)
	}
	niu.NodeName = "n"
	if !reflect.DeepEqual(niu, c) {
		t.Errorf("old keys read %+v, new keys %+v", c.Slots, niu.Slots)
	}
}

// An old key and its new one in one file: which is meant cannot be told.
func TestOldAndNewSlotKeyIsRefused(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"drain:\n  maxConcurrentNodes: 2\nslots:\n  limit: 3\n", "drain.maxConcurrentNodes and slots.limit are both set"},
		{"drain:\n  slotSilenceBound: 2m\nslots:\n  heartbeatBound: 1m\n", "drain.slotSilenceBound and slots.heartbeatBound are both set"},
		{"drain:\n  pools: [{name: a, maxConcurrentNodes: 1, limit: 2}]\n", "sets both maxConcurrentNodes and limit"},
	} {
		if _, _, err := Parse([]byte(tt.yaml), Default()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.yaml, err, tt.want)
		}
	}
	// A bad value under an old key is named by both names.
	if _, _, err := Parse([]byte("drain:\n  maxConcurrentNodes: many\n"), Default()); err == nil || !strings.Contains(err.Error(), "slots.limit") || !strings.Contains(err.Error(), "drain.maxConcurrentNodes as slots.limit") {
		t.Errorf("bad old value: %v", err)
	}
	// A new key beside old keys of other names is no conflict.
	if _, ds, err := Parse([]byte("drain:\n  maxConcurrentNodes: 2\nslots:\n  namespace: x\n"), Default()); err != nil || len(ds) != 1 {
		t.Errorf("= %v, %v", ds, err)
	}
}

// A reload logs a warning per old key, naming the new key.
func TestReloadLogsOldKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("drain:\n  maxConcurrentNodes: 2\n  leaseNamespace: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, ds, err := Load(path, Default(), nil)
	if err != nil || c.Slots.Limit != 2 {
		t.Fatalf("Load = %+v, %v", c.Slots, err)
	}
	var buf bytes.Buffer
	LogDeprecations(slog.New(slog.NewTextHandler(&buf, nil)), path, ds)
	out := buf.String()
	if strings.Count(out, "level=WARN") != 2 || !strings.Contains(out, "key=drain.maxConcurrentNodes newKey=slots.limit") || !strings.Contains(out, "key=drain.leaseNamespace newKey=slots.namespace") {
		t.Errorf("log:\n%s", out)
	}
}

// The old flags still work, and write the new keys.
func TestOldSlotFlagsStillWork(t *testing.T) {
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--drain-max-concurrent-nodes=4", "--drain-lease-namespace=ns", "--drain-slot-silence-bound=30s",
		`--drain-pools=[{"name":"gpu","selector":"gpu=true","maxConcurrentNodes":1}]`}); err != nil {
		t.Fatal(err)
	}
	if c.Slots.Limit != 4 || c.Slots.Namespace != "ns" || c.Slots.HeartbeatBound.Duration != 30*time.Second || len(c.Slots.Pools) != 1 || c.Slots.Pools[0].Limit != 1 {
		t.Errorf("slots %+v", c.Slots)
	}
	for _, name := range []string{oldSlotLimitFlag, oldSlotNamespaceFlag, oldSlotPoolsFlag, oldSlotHeartbeatBoundFlag} {
		if fs.Lookup(name).Deprecated == "" {
			t.Errorf("--%s is not marked deprecated", name)
		}
	}
}

// syncBuffer is a log sink the watcher's goroutine and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The watcher warns of the old keys of a file it reloads, each naming its
// new key, and applies their values.
func TestWatcherWarnsOfOldKeysAtReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("slots:\n  limit: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	var logs syncBuffer
	changed := make(chan Config, 1)
	w := &Watcher{Path: path, Current: Default(), Clock: clk, Interval: time.Second,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		OnChange: func(c Config) { changed <- c }}
	w.Current.NodeName = "n"
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	if err := os.WriteFile(path, []byte("drain:\n  maxConcurrentNodes: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	got := <-changed
	if got.Slots.Limit != 3 {
		t.Errorf("reloaded slots.limit %d, want the old key's 3", got.Slots.Limit)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "key=drain.maxConcurrentNodes newKey=slots.limit") {
		t.Errorf("no warning naming the new key at reload:\n%s", out)
	}
}
