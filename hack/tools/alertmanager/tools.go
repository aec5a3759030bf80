//go:build tools

// Package tools pins the Alertmanager binary hack/build-tools.sh builds.
package tools

import _ "github.com/prometheus/alertmanager/cmd/alertmanager"
