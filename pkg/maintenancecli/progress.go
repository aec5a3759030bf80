package maintenancecli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/node-agent/node-agent/pkg/selfdrain"
)

// progressWidth is the number of cells of the bar.
const progressWidth = 30

// progress redraws one line on a terminal, and elsewhere (a log, a pipe)
// prints each line that differs from the one before.
type progress struct {
	out  io.Writer
	tty  bool
	last string
}

func newProgress(out io.Writer) *progress {
	f, ok := out.(*os.File)
	return &progress{out: out, tty: ok && term.IsTerminal(int(f.Fd()))}
}

// statusLine renders st as one line: the bar, the phase, the pods left and
// the current blocker.
func statusLine(st *selfdrain.Status) string {
	filled := min(max(st.DrainProgress, 0), 100) * progressWidth / 100
	line := fmt.Sprintf("[%s%s] %3d%%  %s  %d/%d pods left", strings.Repeat("#", filled), strings.Repeat(".", progressWidth-filled),
		st.DrainProgress, printable(string(st.Phase)), len(st.PendingPods), st.EvictionPods)
	// Until the agent has listed the pods, 0 of 0 would read as done.
	if st.EvictionPods == 0 && st.Phase == selfdrain.PhaseRunning {
		line = fmt.Sprintf("[%s] cordoned, listing pods", strings.Repeat(".", progressWidth))
	}
	if st.LastError != "" {
		line += "  blocker: " + printable(st.LastError)
	}
	return line
}

func (p *progress) status(st *selfdrain.Status) { p.show(statusLine(st)) }

func (p *progress) show(line string) {
	if line == p.last {
		return
	}
	p.last = line
	if p.tty {
		// Carriage return and erase to the end of the line (ECMA-48 EL).
		fmt.Fprintf(p.out, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(p.out, line)
}

// done ends the line a terminal was redrawing.
func (p *progress) done() {
	if p.tty && p.last != "" {
		fmt.Fprintln(p.out)
	}
}
