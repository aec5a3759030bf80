// Package memrelease gives back, once, the memory that only the agent's
// start-up used: the Go heap's free pages, and the pages of the agent's own
// binary that start-up read (package initialisation, the first list and
// watch, the first labelling) and that an idle agent does not touch again.
//
// Those binary pages are clean and backed by the file: releasing them
// removes them from the process's page table (and so from its RSS), not
// from the page cache, where the kernel reclaims pages no process maps
// before those that are mapped. Of the 21 MiB of the binary resident after
// start-up, an idle agent referenced about 4 MiB in 30 s (issue 43). A page
// read again later is mapped again from the page cache, or read from the
// file.
package memrelease

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// DisableEnv names the environment variable that, set to "false", keeps
// `node-agent run` from releasing its start-up memory.
const DisableEnv = "NODE_AGENT_RELEASE_STARTUP_MEMORY"

// DefaultDelay is how long after start the release comes: long enough for
// the own Node's sync and, with a warm libvirt cache, the first labels; a
// cold discovery's child runs longer, but the daemon only waits for it.
const DefaultDelay = 30 * time.Second

// GCPercent is the garbage collector's target for `node-agent run` when
// $GOGC is not set: a collection when the heap has grown by half of what
// the last one left, not by all of it. An idle agent's live heap is about
// 2.5 MiB, so this keeps about 0.6 MiB less heap (issue 43); the heap is
// small enough that collecting twice as often costs little CPU.
const GCPercent = 50

// SetGCPercent sets GCPercent unless $GOGC (read with getenv) is set, in
// which case the runtime has already applied it.
func SetGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}

// Enabled reports whether the environment leaves the release on: unless
// DisableEnv is "false" (or "0").
func Enabled(getenv func(string) string) bool {
	v, err := strconv.ParseBool(getenv(DisableEnv))
	return err != nil || v
}

// Releaser releases the start-up memory once, Delay after Run starts.
type Releaser struct {
	Delay  time.Duration
	Clock  clock.Clock
	Logger *slog.Logger
}

// Name implements the agent's component interface.
func (r *Releaser) Name() string { return "memrelease" }

// Run waits for r.Delay, releases, logs what it released and returns nil.
func (r *Releaser) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-r.Clock.After(r.Delay):
	}
	before := residentBytes()
	debug.FreeOSMemory()
	heapAfter := residentBytes()
	err := pageOutBinary()
	after := residentBytes()
	if err != nil {
		r.Logger.Info("Start-up pages of the binary not released; the kernel reclaims them under memory pressure", "err", err)
	}
	r.Logger.Info("Start-up memory released", "rssBytesBefore", before,
		"heapReleasedBytes", before-heapAfter, "binaryReleasedBytes", heapAfter-after, "rssBytesAfter", after)
	return nil
}

// addrRange is a mapping's [start, end).
type addrRange struct{ start, end uintptr }

// cleanReadOnlyMappings returns the ranges of the read-only mappings of file
// in smaps, the text of /proc/PID/smaps: the binary's code and read-only
// data. It leaves out every writable mapping, whose pages are the program's
// state, and every mapping with an anonymous page (one the dynamic linker
// wrote before making it read-only), whose content the file does not hold.
func cleanReadOnlyMappings(smaps, file string) []addrRange {
	var out []addrRange
	var cur *addrRange
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(strings.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Anonymous:"); ok {
			if cur != nil && strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")) != "0" {
				cur = nil
			}
			continue
		}
		// A mapping's header: address perms offset dev inode path, the
		// path padded and possibly holding spaces; its fields are the
		// lines that follow, "Name: value".
		f := strings.SplitN(line, " ", 6)
		lo, hi, isHeader := strings.Cut(f[0], "-")
		if !isHeader || len(f) < 5 || strings.HasSuffix(f[0], ":") {
			continue
		}
		flush()
		if len(f) < 6 || len(f[1]) < 2 || f[1][0] != 'r' || f[1][1] != '-' {
			continue
		}
		if path := strings.TrimSuffix(strings.TrimLeft(f[5], " "), " (deleted)"); path != file {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		cur = &addrRange{uintptr(start), uintptr(end)}
	}
	flush()
	return out
}

// residentBytes is the process's VmRSS, or 0 where it cannot be read.
func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
