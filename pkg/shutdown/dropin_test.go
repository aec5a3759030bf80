package shutdown

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestWriteDropIn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logind.conf.d")
	wrote, err := WriteDropIn(dir, 90*time.Second+time.Millisecond)
	if err != nil || !wrote {
		t.Fatalf("WriteDropIn = %v, %v; want a new file", wrote, err)
	}
	path := filepath.Join(dir, DropInName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^InhibitDelayMaxSec=91$`).Match(data) {
		t.Errorf("drop-in %q: want the delay rounded up to 91 s", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("drop-in mode %v, want 0644", fi.Mode().Perm())
	}
	if wrote, err := WriteDropIn(dir, 91*time.Second); err != nil || wrote {
		t.Errorf("WriteDropIn with the same content = %v, %v; want no write", wrote, err)
	}
	if wrote, err := WriteDropIn(dir, 5*time.Minute); err != nil || !wrote {
		t.Errorf("WriteDropIn with a new delay = %v, %v; want a write", wrote, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only %s (no temporary files left)", len(entries), DropInName)
	}
	if _, err := WriteDropIn(dir, 0); err == nil {
		t.Error("WriteDropIn accepted a zero delay")
	}
}
