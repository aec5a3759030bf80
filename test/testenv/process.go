package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one component binary run as a child in its own process group.
type process struct {
	name    string
	path    string
	args    []string
	env     []string // added to the inherited environment
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current run has exited
	waitErr  error
	stopping bool // the current run is being stopped on purpose
	restarts int
}

// start runs the binary. Output goes to logPath, appended, so a restarted
// component keeps the history of its earlier runs.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running as pid %d", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if p.cmd != nil {
		p.restarts++
		fmt.Fprintf(logFile, "\n--- testenv: starting %s again (restart %d) ---\n", p.name, p.restarts)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group, so Stop reaches anything the component forks.
		Setpgid: true,
		// If the test binary dies without running Stop (a panic, a timeout
		// kill), the kernel kills the component too. Pdeathsig follows the
		// thread that forked, which stays alive: Go only ends threads whose
		// goroutine exits while locked to them, and nothing here locks one.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s (%s): %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr, p.stopping = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs
// the group; a grace of zero kills it at once. Stopping a process that has
// already exited is not an error.
func (p *process) stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return nil
	}
	p.stopping = true
	p.mu.Unlock()

	pgid := cmd.Process.Pid
	if !isClosed(done) && grace <= 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	if !isClosed(done) {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
	}
	// The leader is gone; take any child it left behind in its group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// pid returns the process id of the current run, or 0.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// exitError returns a non-nil error when the current run has exited without
// being asked to.
func (p *process) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !isClosed(p.done) || p.stopping {
		return nil
	}
	err := p.waitErr
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s (pid %d) exited unexpectedly: %w", p.name, p.cmd.Process.Pid, err)
}

// tail returns up to n last lines of the component's log.
func (p *process) tail(n int) string {
	return TailFile(p.logPath, n)
}

// TailFile returns up to n last lines of the file at path.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	// The last 64 KiB hold far more than the lines anyone reads in a failure.
	const window = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		_, _ = f.Seek(fi.Size()-window, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	return Tail(string(data), n)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
