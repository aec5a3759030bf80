//go:build tools

// Package tools records the commands this module builds.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
