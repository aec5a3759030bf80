package config

import (
	"reflect"
	"testing"
)

// A changed reboot key is named as its section in the restart warning, not
// as a top-level key.
func TestRestartOnlyNamesTheRebootSection(t *testing.T) {
	a := Default()
	b := Default()
	b.Reboot.Window.Start = "22:00"
	if got := restartOnly(a, b); !reflect.DeepEqual(got, []string{"reboot"}) {
		t.Errorf("restartOnly = %q, want [reboot]", got)
	}
	b = Default()
	b.Labeller.MinCPUModel = ""
	if got := restartOnly(a, b); len(got) != 0 {
		t.Errorf("restartOnly = %q for a labeller change, which a reload applies", got)
	}
}
