//go:build tools

// Package deps keeps the module's dependencies in go.mod while the packages
// that use them are being written. It is never built.
package deps

import (
	_ "github.com/coreos/go-systemd/v22/login1"
	_ "github.com/godbus/dbus/v5"
	_ "github.com/klauspost/cpuid/v2"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/utils/clock/testing"
)
