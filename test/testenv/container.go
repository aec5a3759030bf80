package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// E2EEnv, set to 1 (as `make e2e` does), makes a missing container
// prerequisite a failure instead of a skip.
const E2EEnv = "NODE_AGENT_E2E"

// RootfsEnv overrides where hack/rootfs.sh put the rootfs.
const RootfsEnv = "NODE_AGENT_ROOTFS"

// Exit statuses of systemd-nspawn -b: the container's systemd exits with the
// kind of shutdown it performed.
const (
	ExitPoweroff = 0
	ExitReboot   = 133
)

// RootfsPath is $NODE_AGENT_ROOTFS, or ~/.cache/node-agent/rootfs-bookworm
// as hack/rootfs.sh builds it.
func RootfsPath() string {
	if p := os.Getenv(RootfsEnv); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "node-agent", "rootfs-bookworm")
}

// RequireContainer returns the rootfs path, or skips the test (fails it with
// $NODE_AGENT_E2E=1) when something a Container needs is missing.
func RequireContainer(t testing.TB) string {
	t.Helper()
	rootfs, missing := ContainerPrerequisites()
	if len(missing) > 0 {
		skipOrFail(t, "end-to-end prerequisites missing: "+strings.Join(missing, "; "), E2EEnv)
	}
	return rootfs
}

// ContainerPrerequisites returns the rootfs path and what a Container needs
// that this machine lacks, each with how to get it.
func ContainerPrerequisites() (rootfs string, missing []string) {
	if os.Geteuid() != 0 {
		missing = append(missing, "root (systemd-nspawn and overlay mounts need it)")
	}
	for _, bin := range []string{"systemd-nspawn", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin+" (run hack/install-deps.sh nspawn)")
		}
	}
	rootfs = RootfsPath()
	if _, err := os.Stat(filepath.Join(rootfs, "usr/lib/systemd/systemd")); err != nil {
		missing = append(missing, fmt.Sprintf("a rootfs with systemd at %s (run hack/rootfs.sh, about 3 min; %s overrides the path)", rootfs, RootfsEnv))
	}
	return rootfs, missing
}

// Bind is a bind mount from the host into a Container.
type Bind struct {
	Host, Container string
	// ReadOnly selects --bind-ro over --bind.
	ReadOnly bool
}

// ContainerOptions configure a Container.
type ContainerOptions struct {
	// Rootfs is the read-only lower layer; default RootfsPath().
	Rootfs string
	// Binds are added to every boot.
	Binds []Bind
	// ExtraArgs are more systemd-nspawn options.
	ExtraArgs []string
}

// Container is a real systemd for the end-to-end tests: a Debian rootfs
// (built by hack/rootfs.sh) booted with systemd-nspawn, with systemd as PID
// 1, dbus and systemd-logind inside. Unless ContainerOptions.ExtraArgs say
// otherwise it shares the host's network, so it reaches a control plane on
// 127.0.0.1.
//
// Its root is an overlay of the cached rootfs: the rootfs is never written,
// while the container's own changes survive its reboots (a second Boot sees
// what the first left), as on a real host. Everything is torn down when the
// test ends. Run runs a single command in the same root without booting, as
// test/image does in the image's root filesystem.
type Container struct {
	t     testing.TB
	opts  ContainerOptions
	name  string
	dir   string // holds upper, work, root and the console logs
	root  string // the overlay mount, the container's /
	boots int
	mu    sync.Mutex
	run   *containerBoot // the current or last boot
}

type containerBoot struct {
	cmd      *exec.Cmd
	pid      int // the container's PID 1 (systemd) in the host's PID namespace
	console  string
	exited   chan struct{}
	exitCode int
	waitErr  error
}

// NewContainer prepares a container; Boot starts it. Call RequireContainer
// first.
func NewContainer(t testing.TB, opts ContainerOptions) *Container {
	t.Helper()
	if opts.Rootfs == "" {
		opts.Rootfs = RootfsPath()
	}
	dir := t.TempDir()
	c := &Container{
		t:    t,
		opts: opts,
		// Names the machine; systemd-nspawn keys some run-time state by it,
		// so every container gets its own.
		name: fmt.Sprintf("na-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9),
		dir:  dir,
		root: filepath.Join(dir, "root"),
	}
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", opts.Rootfs, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := syscall.Mount("overlay", c.root, "overlay", 0, data); err != nil {
		t.Fatalf("mounting an overlay of %s at %s: %v; the kernel needs overlayfs", opts.Rootfs, c.root, err)
	}
	// Cleanups run last-in first-out: this one runs before t.TempDir's
	// removal, which would fail on a mounted directory.
	t.Cleanup(c.cleanup)
	return c
}

// Name is the machine name given to systemd-nspawn.
func (c *Container) Name() string { return c.name }

// Root is the container's / as seen from the host. Prefer WriteFile and
// ReadFile, which do not follow symlinks out of it.
func (c *Container) Root() string { return c.root }

// WriteFile writes a file into the container, before or during a boot,
// creating parent directories. It never follows a symlink out of the
// container's root.
func (c *Container) WriteFile(path string, data []byte, perm os.FileMode) error {
	return c.create(path, func(r *os.Root, rel string) error {
		if err := r.WriteFile(rel, data, perm); err != nil {
			return fmt.Errorf("container %s: writing %s: %w", c.name, path, err)
		}
		return nil
	})
}

// Symlink makes path inside the container a symbolic link to target (a path
// as the container sees it, such as a unit file to enable), creating parent
// directories. It never follows a symlink out of the container's root.
func (c *Container) Symlink(target, path string) error {
	return c.create(path, func(r *os.Root, rel string) error {
		if err := r.Symlink(target, rel); err != nil {
			return fmt.Errorf("container %s: linking %s to %s: %w", c.name, path, target, err)
		}
		return nil
	})
}

// create makes the parent directories of path in the container and calls
// do with path relative to the container's root, within it.
func (c *Container) create(path string, do func(r *os.Root, rel string) error) error {
	r, err := os.OpenRoot(c.root)
	if err != nil {
		return err
	}
	defer r.Close()
	rel := strings.TrimPrefix(filepath.Clean(path), "/")
	if err := r.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
		return fmt.Errorf("container %s: creating the directory of %s: %w", c.name, path, err)
	}
	return do(r, rel)
}

// JournalDir is where the container's systemd-journald keeps its persistent
// journal, as seen from the host. The files outlive a boot (they are in the
// overlay), so `journalctl -D` reads a boot's log after the container has
// gone down.
func (c *Container) JournalDir() string { return filepath.Join(c.root, "var", "log", "journal") }

// ReadFile reads a file of the container.
func (c *Container) ReadFile(path string) ([]byte, error) {
	r, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.ReadFile(strings.TrimPrefix(filepath.Clean(path), "/"))
}

// Boot starts systemd in the container and returns once its PID 1 is known.
// Use WaitReady to wait for the boot to finish.
func (c *Container) Boot(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil && !isClosed(c.run.exited) {
		return fmt.Errorf("container %s: already running", c.name)
	}
	c.boots++
	console := filepath.Join(c.dir, fmt.Sprintf("console-%d.log", c.boots))
	out, err := os.Create(console)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("systemd-nspawn", append(c.nspawnArgs(), "-b")...)
	cmd.Stdout = out
	cmd.Stderr = out
	// Should the test binary die without its cleanups, systemd-nspawn gets
	// SIGTERM, which it turns into a clean poweroff of the container.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("container %s: starting systemd-nspawn: %w", c.name, err)
	}
	b := &containerBoot{cmd: cmd, console: console, exited: make(chan struct{}), exitCode: -1}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			b.exitCode = 0
		case errors.As(err, &ee) && ee.Exited():
			b.exitCode = ee.ExitCode()
		default:
			b.waitErr = err
		}
		close(b.exited)
	}()
	c.run = b
	pid, err := findContainerInit(ctx, cmd.Process.Pid, b.exited)
	if err != nil {
		return fmt.Errorf("container %s: %w; console: %s", c.name, err, TailFile(console, 20))
	}
	b.pid = pid
	c.t.Logf("container %s: booting (systemd-nspawn %d, PID 1 = host PID %d), console log %s", c.name, cmd.Process.Pid, pid, console)
	return nil
}

// nspawnArgs are the systemd-nspawn options of both Boot and Run.
func (c *Container) nspawnArgs() []string {
	args := []string{
		"-q", "-D", c.root,
		// Without a host systemd there is no machined to register with and
		// no scope to allocate; --keep-unit avoids "Failed to allocate scope".
		"--register=no", "--keep-unit",
		// No terminal: the console is a pipe (into the log file, or the
		// command's own stdout and stderr, kept apart).
		"--console=pipe",
		"--machine=" + c.name,
	}
	for _, b := range c.opts.Binds {
		flag := "--bind="
		if b.ReadOnly {
			flag = "--bind-ro="
		}
		args = append(args, flag+b.Host+":"+b.Container)
	}
	return append(args, c.opts.ExtraArgs...)
}

// Run returns a command that runs args in the container's root without
// booting it, with the same binds and options as Boot and its own /dev
// (which has no /dev/kvm unless a Bind adds it). Its changes stay in the
// overlay, as a boot's do. Under --as-pid2 a stub init is PID 1 and reaps
// orphans: libvirt's QEMU probes daemonize, so once libvirt has stopped one
// its parent is PID 1, and a program of the test as PID 1 would leave it a
// zombie that libvirt then waits for (the DaemonSet's shareProcessNamespace
// is there for the same reason). Run and Boot must not overlap.
func (c *Container) Run(ctx context.Context, args ...string) *exec.Cmd {
	full := append(c.nspawnArgs(), "--as-pid2", "--")
	cmd := exec.CommandContext(ctx, "systemd-nspawn", append(full, args...)...)
	// As for Boot: should the test binary die, systemd-nspawn ends the
	// container.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	return cmd
}

// findContainerInit finds the process among nspawn's descendants that is
// PID 1 in its own PID namespace: the container's systemd.
func findContainerInit(ctx context.Context, nspawn int, exited <-chan struct{}) (int, error) {
	for {
		for _, pid := range descendants(nspawn) {
			if nsPIDs(pid) == "1" {
				return pid, nil
			}
		}
		select {
		case <-exited:
			return 0, errors.New("systemd-nspawn exited before the container's systemd started")
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the container's systemd: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func descendants(root int) []int {
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, s := range strings.Fields(string(data)) {
				if child, err := strconv.Atoi(s); err == nil {
					out = append(out, child)
					queue = append(queue, child)
				}
			}
		}
	}
	return out
}

// nsPIDs returns the innermost PID of pid (the last NSpid field).
func nsPIDs(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 1 {
				return f[len(f)-1]
			}
		}
	}
	return ""
}

// PID is the host PID of the container's systemd in the current boot.
func (c *Container) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		return 0
	}
	return c.run.pid
}

// WaitReady waits until systemd finished booting (`systemctl
// is-system-running --wait`) and returns its state: "running", or
// "degraded" when a unit failed (the failed units are logged).
func (c *Container) WaitReady(ctx context.Context) (string, error) {
	c.mu.Lock()
	console := c.run.console
	c.mu.Unlock()
	for {
		out, _ := c.Exec(ctx, "systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(string(out))
		switch state {
		case "running":
			return state, nil
		case "degraded":
			failed, _ := c.Exec(ctx, "systemctl", "--failed", "--no-legend", "--no-pager")
			c.t.Logf("container %s: booted degraded; failed units:\n%s", c.name, failed)
			return state, nil
		}
		// Before systemd listens on its private socket, systemctl fails at
		// once; keep asking.
		select {
		case <-c.Exited():
			return "", fmt.Errorf("container %s: exited while booting (status %d); console: %s", c.name, c.ExitCode(), TailFile(console, 30))
		case <-ctx.Done():
			return "", fmt.Errorf("container %s: waiting for the boot to finish (last state %q): %w", c.name, state, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Command returns a command that runs args inside the container, in all its
// namespaces and with its root (nsenter -a). It is not in any systemd unit;
// use `systemd-run` as args[0] for a service.
func (c *Container) Command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"-t", strconv.Itoa(c.PID()), "-a", "--"}, args...)
	return exec.CommandContext(ctx, "nsenter", full...)
}

// Exec runs args inside the container and returns stdout and stderr
// together.
func (c *Container) Exec(ctx context.Context, args ...string) ([]byte, error) {
	out, err := c.Command(ctx, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("container %s: %s: %w: %s", c.name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// MustExec is Exec that fails the test on error.
func (c *Container) MustExec(ctx context.Context, args ...string) string {
	c.t.Helper()
	out, err := c.Exec(ctx, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(out)
}

// Exited is closed when the current boot's systemd-nspawn has exited.
func (c *Container) Exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.run.exited
}

// Running reports whether the current boot is still running.
func (c *Container) Running() bool { return !isClosed(c.Exited()) }

// ExitCode is systemd-nspawn's exit status (ExitReboot, ExitPoweroff, ...)
// once Exited is closed, -1 before or when it was killed by a signal.
func (c *Container) ExitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil || !isClosed(c.run.exited) {
		return -1
	}
	return c.run.exitCode
}

// Wait waits for the current boot to end and returns its exit status.
func (c *Container) Wait(ctx context.Context) (int, error) {
	select {
	case <-c.Exited():
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.run.waitErr != nil {
			return -1, fmt.Errorf("container %s: %w", c.name, c.run.waitErr)
		}
		return c.run.exitCode, nil
	case <-ctx.Done():
		return -1, fmt.Errorf("container %s: waiting for it to exit: %w", c.name, ctx.Err())
	}
}

// Console returns the console output of the current or last boot.
func (c *Container) Console() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil {
		return ""
	}
	data, _ := os.ReadFile(c.run.console)
	return string(data)
}

// Kill ends the current boot at once: SIGKILL to the container's PID 1 takes
// its whole PID namespace down, then systemd-nspawn exits and unmounts.
func (c *Container) Kill() {
	c.mu.Lock()
	b := c.run
	c.mu.Unlock()
	if b == nil || isClosed(b.exited) {
		return
	}
	if b.pid > 0 {
		_ = syscall.Kill(b.pid, syscall.SIGKILL)
	}
	select {
	case <-b.exited:
		return
	case <-time.After(30 * time.Second):
	}
	c.t.Logf("container %s: systemd-nspawn did not exit after its container was killed; killing it", c.name)
	_ = b.cmd.Process.Kill()
	<-b.exited
}

func (c *Container) cleanup() {
	if c.t.Failed() && c.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _ := c.Exec(ctx, "journalctl", "--no-pager", "-b", "-n", "150")
		cancel()
		c.t.Logf("container %s: journal before cleanup:\n%s", c.name, out)
	}
	if c.t.Failed() {
		c.t.Logf("container %s: console:\n%s", c.name, TailFile(filepath.Join(c.dir, fmt.Sprintf("console-%d.log", c.boots)), 40))
	}
	c.Kill()
	// MNT_DETACH: a process that still has a file open below would make a
	// plain unmount fail and leave the mount behind.
	if err := syscall.Unmount(c.root, syscall.MNT_DETACH); err != nil {
		c.t.Errorf("container %s: unmounting %s: %v", c.name, c.root, err)
	}
}

// DelayLock returns the line of `systemd-inhibit --list` in the container
// that is node-agent's shutdown delay lock.
func (c *Container) DelayLock(ctx context.Context) (string, bool) {
	out, err := c.Exec(ctx, "systemd-inhibit", "--list", "--no-pager", "--no-legend")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// WHO UID USER PID COMM WHAT WHY... MODE
		if len(f) >= 7 && f[0] == "node-agent" && f[5] == "shutdown" && f[len(f)-1] == "delay" {
			return strings.Join(f, " "), true
		}
	}
	return "", false
}
