// Package enum owns the parsing of the configuration's enumerated settings
// (a value out of a short list, empty meaning the default), so that every
// such key refuses a bad value with the same message. It imports nothing of
// Kubernetes: the spec packages that the configuration validates use it.
package enum

import (
	"fmt"
	"strings"
)

// Parse returns s as a T when it is one of allowed, def when s is empty, and
// otherwise an error that lists the allowed values. The match is exact: a
// value in another case or with spaces is refused.
func Parse[T ~string](s string, def T, allowed ...T) (T, error) {
	if s == "" {
		return def, nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if string(a) == s {
			return a, nil
		}
		names[i] = string(a)
	}
	var zero T
	switch len(names) {
	case 0:
		return zero, fmt.Errorf("%q: no value is allowed", s)
	case 1:
		return zero, fmt.Errorf("%q: must be %s", s, names[0])
	case 2:
		return zero, fmt.Errorf("%q: must be %s or %s", s, names[0], names[1])
	}
	return zero, fmt.Errorf("%q: must be one of %s", s, strings.Join(names, ", "))
}
