package targetpod

import (
	"fmt"
	"strings"
)

// release is the KubeVirt minor and patch release whose rules apply.
type release struct{ minor, patch int }

// latest is the newest release the doc describes (v1.9.0).
var latest = release{9, 0}

// atLeast reports whether r is minor.patch or later.
func (r release) atLeast(minor, patch int) bool {
	return r.minor > minor || (r.minor == minor && r.patch >= patch)
}

// release reads Cluster.Version. The doc covers v1.7 to v1.9: an empty
// version means the v1.9 rules; a release outside that range is rendered
// with the nearest covered one, and said.
func (r *renderer) release() release {
	ver := r.c.Version
	if ver == "" {
		return latest
	}
	var major, minor, patch int
	core, _, _ := strings.Cut(strings.TrimPrefix(ver, "v"), "-")
	if n, err := fmt.Sscanf(core, "%d.%d.%d", &major, &minor, &patch); err != nil || n != 3 || major != 1 {
		r.note("KubeVirt version %q not understood: rendered with the v1.9 rules", ver)
		return latest
	}
	switch {
	case minor < 7:
		r.note("KubeVirt %s is older than v1.7, the oldest release described: rendered with the v1.7.0 rules", ver)
		return release{7, 0}
	case minor > 9:
		r.note("KubeVirt %s is newer than v1.9, the newest release described: rendered with the v1.9 rules", ver)
		return release{9, patch}
	}
	return release{minor, patch}
}
