package subprocess

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindHelper(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	plain := filepath.Join(dir, "plain")
	for path, mode := range map[string]os.FileMode{exe: 0o755, plain: 0o644} {
		if err := os.WriteFile(path, []byte("#!/bin/true\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env string
		want      string // the path, or a part of the error
		ok        bool
	}{
		{"override", exe, exe, true},
		{"override not executable", plain, "not an executable file", false},
		{"override a directory", dir, "not an executable file", false},
		{"override missing", filepath.Join(dir, "missing"), filepath.Join(dir, "missing") + " ($" + HelperEnv + "): no such file", false},
		// Nothing is built beside the test binary.
		{"beside the executable", "", filepath.Join(filepath.Dir(self), HelperName) + " (beside " + self + "): no such file", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(HelperEnv, tc.env)
			got, err := FindHelper()
			switch {
			case tc.ok && (err != nil || got != tc.want):
				t.Errorf("FindHelper() = %q, %v; want %q", got, err, tc.want)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("FindHelper() = %q, %v; want an error containing %q", got, err, tc.want)
			case !tc.ok && !strings.Contains(err.Error(), HelperEnv):
				t.Errorf("the error does not say how to point at the helper: %v", err)
			}
		})
	}
}
