package policy

import "testing"

func TestCompileAlertRegexp(t *testing.T) {
	re, err := CompileAlertRegexp("a|b")
	if err != nil {
		t.Fatal(err)
	}
	// Anchoring must wrap the whole alternation, not its ends only.
	for name, want := range map[string]bool{"a": true, "b": true, "ab": false, "xa": false, "bx": false} {
		if re.MatchString(name) != want {
			t.Errorf("%q matches %q = %v, want %v", re, name, !want, want)
		}
	}
	if re, err := CompileAlertRegexp(""); re != nil || err != nil {
		t.Errorf(`"" = %v, %v; want nil, nil (every alert)`, re, err)
	}
}
