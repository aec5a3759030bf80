package testenv

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RequireBinaries skips the test when a binary the options need (plus any
// extra ones, such as BinKubectl) is missing from the bin directory, or fails
// it when $NODE_AGENT_INTEGRATION is 1. `make test` sets that variable so a
// broken tools build cannot pass CI as a row of skips.
func RequireBinaries(t testing.TB, opts Options, extra ...string) {
	t.Helper()
	if err := CheckBinaries(opts, extra...); err != nil {
		skipOrFail(t, err.Error(), IntegrationEnv)
	}
}

// StartForTest starts the control plane for one test, as RequireBinaries
// allows, and registers its cleanup: it reports components that died during
// the test, prints the tail of every component's log when the test failed,
// and stops every process. Progress goes to the test log unless
// opts.Logger is set.
func StartForTest(t testing.TB, opts Options) *Env {
	t.Helper()
	RequireBinaries(t, opts)
	if dir := os.Getenv(LogDirEnv); dir != "" && opts.LogDir == "" {
		opts.LogDir = filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					return slog.Attr{} // the test log has its own order
				}
				return a
			},
		}))
	}
	e, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Err(); err != nil {
			t.Errorf("control plane: %v", err)
		}
		if t.Failed() {
			for _, c := range e.Components() {
				t.Logf("--- last lines of %s (pid %d, %s) ---\n%s", c.Name, c.PID, c.LogFile, e.LogTail(c.Name, 40))
			}
		}
		if err := e.Discard(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	return e
}

// LogDirEnv names a directory in which StartForTest keeps the component logs
// of every test, in a subdirectory named after the test, for example to
// collect them as CI artifacts. Unset, logs are deleted with the Env.
const LogDirEnv = "NODE_AGENT_TESTENV_LOG_DIR"

// testWriter sends each log line to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
