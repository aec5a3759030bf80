// Package subprocess runs host CPU discovery in a short-lived child process,
// the discovery helper (cmd/node-agent-discover), so that libvirt's libraries,
// its embedded QEMU driver and its threads live only while a discovery runs,
// never in the long-running daemon, whose binary links no libvirt at all. A
// libvirt crash or hang then costs one discovery: the daemon, and the
// shutdown guard in it, stay up, and the next period tries again.
//
// The protocol is one JSON Request on the child's stdin and one JSON response
// on its stdout. The child's stderr is its log; Runner passes each line on to
// the daemon's logger. Serve is the child's side, Runner the daemon's, and
// FindHelper says where the child's binary is.
package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/node-agent/node-agent/pkg/hostcpu"
)

// Request is what the child discovers with: the live parts of
// hostcpu.Options.
type Request struct {
	LibvirtURI   string   `json:"libvirtURI,omitempty"`
	VirtType     string   `json:"virtType,omitempty"`
	StateDir     string   `json:"stateDir,omitempty"`
	ExpandModels []string `json:"expandModels,omitempty"`
	// CPUMapDir is hostcpu.Options.CPUMapDir (`node-agent labels --cpu-map`).
	CPUMapDir string `json:"cpuMapDir,omitempty"`
	// LogLevel is the daemon's level (debug, info, warn, error), so that
	// the child's log on stderr is as verbose as the daemon's.
	LogLevel string `json:"logLevel,omitempty"`
}

// Options returns the hostcpu.Options the child discovers with; the child adds
// its libvirt binding (Dial) and its logger.
func (r Request) Options() hostcpu.Options {
	return hostcpu.Options{
		LibvirtURI:   r.LibvirtURI,
		VirtType:     r.VirtType,
		StateDir:     r.StateDir,
		CPUMapDir:    r.CPUMapDir,
		ExpandModels: r.ExpandModels,
	}
}

// Level is LogLevel as a slog.Level; info when it is empty or unknown.
func (r Request) Level() slog.Level {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(r.LogLevel)); err != nil {
		return slog.LevelInfo
	}
	return lvl
}

// response is the child's answer: a snapshot or why there is none.
type response struct {
	Host  *hostcpu.HostCPU `json:"host,omitempty"`
	Error string           `json:"error,omitempty"`
}

// maxOutput bounds what is read from a child's stdout. A snapshot is tens of
// kilobytes; a child that prints more is broken.
const maxOutput = 16 << 20

// Serve is the child's side: it reads one Request from in, discovers with it
// and writes the response to out. A discovery error is part of the response,
// not Serve's error: the daemon reports it like any other failed discovery.
func Serve(ctx context.Context, in io.Reader, out io.Writer, discover func(context.Context, Request) (*hostcpu.HostCPU, error)) error {
	var req Request
	if err := json.NewDecoder(io.LimitReader(in, maxOutput)).Decode(&req); err != nil {
		return fmt.Errorf("reading the discovery request on stdin: %w; %s is run by node-agent, not by hand (use `node-agent labels`)", err, HelperName)
	}
	var resp response
	h, err := discover(ctx, req)
	if err != nil {
		resp.Error = err.Error()
	} else {
		resp.Host = h
	}
	return json.NewEncoder(out).Encode(resp)
}

// Runner is the daemon's side: each Discover starts Command, hands it the
// request and reads its answer.
type Runner struct {
	// Command is the child's argv, such as
	// ["/usr/local/bin/node-agent-discover"] (see FindHelper).
	Command []string
	// Env is the child's environment; nil means the daemon's.
	Env []string
	// Timeout bounds one discovery; the child's process group is killed
	// when it passes. Zero means no bound but ctx's.
	Timeout time.Duration
	// Logger receives the child's stderr, one record per line, and a
	// record per child.
	Logger *slog.Logger
	// Stderr, when set, receives the child's stderr lines as they are,
	// instead of Logger: `node-agent labels` shows the child's log as its
	// own.
	Stderr io.Writer
	// AfterKill runs after a child was killed (timeout or ctx), to clean up
	// what it may have left: libvirt's embedded driver starts its QEMU probes
	// daemonized, outside the child's process group.
	AfterKill func()
}

// Discover runs one discovery in a child process. Its errors name what went
// wrong with the child: a timeout, a signal, an exit status, or output that is
// not a response, with the last lines of its stderr.
func (r *Runner) Discover(ctx context.Context, req Request) (*hostcpu.HostCPU, error) {
	if len(r.Command) == 0 {
		return nil, errors.New("discovery child: no command configured")
	}
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cctx := ctx
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(cctx, r.Command[0], r.Command[1:]...)
	cmd.Env = r.Env
	cmd.Stdin = bytes.NewReader(in)
	var out limitedBuffer
	cmd.Stdout = &out
	errLog := &lineLogger{log: log, raw: r.Stderr}
	cmd.Stderr = errLog
	// Its own process group, so that a kill reaches whatever the child
	// started and did not daemonize.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	// A grandchild holding stdout or stderr open must not keep Wait
	// waiting once the child is gone.
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	err = cmd.Run()
	errLog.flush()
	pid := 0
	if cmd.Process != nil {
		pid = cmd.Process.Pid
	}
	var signaled bool
	var sig syscall.Signal
	var maxRSS int64
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			signaled, sig = true, ws.Signal()
		}
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			maxRSS = ru.Maxrss * 1024 // ru_maxrss is in KiB on Linux
		}
	}
	log.Info("Discovery child finished", "pid", pid, "duration", time.Since(start), "maxRSSBytes", maxRSS, "err", err)

	killed := cctx.Err() != nil
	if killed && r.AfterKill != nil {
		r.AfterKill()
	}
	switch {
	case killed && ctx.Err() != nil:
		return nil, ctx.Err()
	case killed:
		return nil, fmt.Errorf("discovery child (pid %d) gave no answer within %s and was killed; libvirt or QEMU may hang: %w%s", pid, r.Timeout, context.DeadlineExceeded, errLog.tail())
	case signaled:
		return nil, fmt.Errorf("discovery child (pid %d) died on signal %s; libvirt or QEMU may have crashed%s", pid, sig, errLog.tail())
	case err != nil:
		return nil, fmt.Errorf("discovery child (pid %d) failed: %w%s", pid, err, errLog.tail())
	}
	if out.overflow {
		return nil, fmt.Errorf("discovery child (pid %d) printed more than %d bytes; it is not a node-agent of this version", pid, maxOutput)
	}
	var resp response
	dec := json.NewDecoder(bytes.NewReader(out.buf.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("discovery child (pid %d) printed no valid answer (%w): %q", pid, err, clip(out.buf.String(), 200))
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("discovery child: %s", resp.Error)
	}
	if resp.Host == nil {
		return nil, fmt.Errorf("discovery child (pid %d) answered neither a snapshot nor an error", pid)
	}
	return resp.Host, nil
}

// limitedBuffer keeps at most maxOutput bytes and remembers if there were
// more.
type limitedBuffer struct {
	buf      bytes.Buffer
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.buf.Len(); len(p) > room {
		b.overflow = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// lineLogger logs each line written to it, and keeps the last few for error
// messages.
type lineLogger struct {
	log     *slog.Logger
	raw     io.Writer // if set, lines go here instead of log
	mu      sync.Mutex
	partial []byte
	last    []string
}

const keepLines = 3

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.emit(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	// A child that never ends a line must not grow this without bound.
	if len(l.partial) > 64<<10 {
		l.emit(string(l.partial))
		l.partial = nil
	}
	return len(p), nil
}

func (l *lineLogger) emit(line string) {
	line = strings.TrimRight(line, "\r")
	if line == "" {
		return
	}
	if l.raw != nil {
		_, _ = io.WriteString(l.raw, line+"\n")
	} else {
		l.log.Info("Discovery child", "stderr", line)
	}
	l.last = append(l.last, line)
	if len(l.last) > keepLines {
		l.last = l.last[1:]
	}
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.emit(string(l.partial))
		l.partial = nil
	}
}

// tail returns the last stderr lines for an error message.
func (l *lineLogger) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return ""
	}
	return "; its stderr ended with: " + clip(strings.Join(l.last, " | "), 400)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
