// Package version holds the build identity of node-agent. The Makefile stamps
// Version and Commit with -ldflags; a plain `go build` reports "devel".
package version

import "runtime"

var (
	// Version is the release version, for example v0.1.0.
	Version = "devel"
	// Commit is the git commit the binary was built from.
	Commit = "unknown"
)

// Info describes this binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
}

// Get returns the build identity of the running binary.
func Get() Info {
	return Info{Version: Version, Commit: Commit, GoVersion: runtime.Version()}
}
