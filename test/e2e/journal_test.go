//go:build linux

package e2e

// The journal parser: the container's journal, read after it went down, with
// node-agent's lines split into their structured keys.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/node-agent/node-agent/test/testenv"
)

// journal is the container's journal, read from the host with journalctl.
type journal []journalEntry

type journalEntry struct {
	// At is when journald received the line: never before it was logged,
	// and, journald running inside the container, before the container
	// exited.
	At time.Time
	// Logged is node-agent's own time= field (milliseconds), when it was
	// logged; At for lines of other programs.
	Logged time.Time
	Unit   string
	Ident  string
	Msg    string
	// Fields are the key=value pairs of node-agent's lines (slog's text
	// format); nil for other programs.
	Fields map[string]string
}

// readJournal reads the container's persistent journal files, which works
// after the container has gone down. Read before the next boot, it holds the
// boot that went down and the ones before it.
func readJournal(t *testing.T, c *testenv.Container) journal {
	t.Helper()
	j, err := loadJournal(c)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func loadJournal(c *testenv.Container) (journal, error) {
	cmd := exec.Command("journalctl", "--directory="+c.JournalDir(), "--output=json", "--no-pager")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl --directory=%s: %v: %s", c.JournalDir(), err, strings.TrimSpace(stderr.String()))
	}
	var j journal
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			continue
		}
		us, err := strconv.ParseInt(journalField(raw["__REALTIME_TIMESTAMP"]), 10, 64)
		if err != nil {
			continue
		}
		e := journalEntry{
			At:    time.UnixMicro(us),
			Unit:  journalField(raw["_SYSTEMD_UNIT"]),
			Ident: journalField(raw["SYSLOG_IDENTIFIER"]),
			Msg:   journalField(raw["MESSAGE"]),
		}
		e.Logged = e.At
		if e.Unit == agentUnit {
			e.Fields = logfmt(e.Msg)
			if at, err := time.Parse(time.RFC3339Nano, e.Fields["time"]); err == nil {
				e.Logged = at
			}
		}
		j = append(j, e)
	}
	return j, sc.Err()
}

// journalField decodes a field of journalctl's JSON output: a string, or an
// array of bytes when the value is not printable UTF-8.
func journalField(m json.RawMessage) string {
	var s string
	if json.Unmarshal(m, &s) == nil {
		return s
	}
	var bs []int
	if json.Unmarshal(m, &bs) == nil {
		b := make([]byte, len(bs))
		for i, v := range bs {
			b[i] = byte(v)
		}
		return string(b)
	}
	return ""
}

// find returns the first entry that match accepts and its index, or -1.
func (j journal) find(match func(journalEntry) bool) (journalEntry, int) {
	for i, e := range j {
		if match(e) {
			return e, i
		}
	}
	return journalEntry{}, -1
}

// logKey is a key and value of node-agent's structured log.
type logKey struct{ key, value string }

// in reports whether e is a line of node-agent's that carries k.
func (k logKey) in(e journalEntry) bool {
	return e.Unit == agentUnit && e.Fields[k.key] == k.value
}

func (k logKey) String() string { return k.key + "=" + k.value }

// logindSaid matches systemd-logind's lines that contain s.
func logindSaid(s string) func(journalEntry) bool {
	return func(e journalEntry) bool { return e.Ident == "systemd-logind" && strings.Contains(e.Msg, s) }
}

// agent returns node-agent's first line that carries k, failing the test
// when there is none.
func (j journal) agent(t *testing.T, k logKey) (journalEntry, int) {
	t.Helper()
	e, i := j.find(k.in)
	if i < 0 {
		t.Fatalf("node-agent never logged %s", k)
	}
	return e, i
}

// logind returns systemd-logind's first line containing s, failing the test
// when there is none.
func (j journal) logind(t *testing.T, s string) journalEntry {
	t.Helper()
	e, i := j.find(logindSaid(s))
	if i < 0 {
		t.Fatalf("systemd-logind never logged %q", s)
	}
	return e
}

// logfmt splits a line of slog's text format into its keys and values;
// quoted values are unquoted. It stops at the first pair it cannot read.
func logfmt(line string) map[string]string {
	out := map[string]string{}
	rest := strings.TrimSpace(line)
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			break
		}
		var value string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				break
			}
			value, _ = strconv.Unquote(q)
			after = after[len(q):]
		} else {
			value, after, _ = strings.Cut(after, " ")
		}
		out[key] = value
		rest = strings.TrimLeft(after, " ")
	}
	return out
}

// agentLog is node-agent's part of the journal, for failure reports.
func agentLog(c *testenv.Container) string {
	j, err := loadJournal(c)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range j {
		if e.Unit == agentUnit || e.Ident == "systemd-logind" {
			fmt.Fprintf(&b, "%s %s: %s\n", e.At.Format("15:04:05.000000"), e.Ident, e.Msg)
		}
	}
	return b.String()
}

func TestLogfmt(t *testing.T) {
	got := logfmt(`time=2026-01-02T03:04:05.123Z level=INFO msg="Node drained for shutdown; releasing the delay lock" component=shutdown event=ShutdownDrainEnded outcome=drained detail="drained 3 pods in time" left=1.5s`)
	want := map[string]string{
		"time": "2026-01-02T03:04:05.123Z", "level": "INFO", "msg": "Node drained for shutdown; releasing the delay lock",
		"component": "shutdown", "event": "ShutdownDrainEnded", "outcome": "drained", "detail": "drained 3 pods in time", "left": "1.5s",
	}
	if !maps.Equal(got, want) {
		t.Errorf("logfmt = %v, want %v", got, want)
	}
	if got := logfmt(`msg="a \"quoted\" word" err="x=y"`); got["msg"] != `a "quoted" word` || got["err"] != "x=y" {
		t.Errorf("quoted values: %v", got)
	}
}
