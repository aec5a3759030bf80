//go:build tools

// Package tools records the commands this module builds.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
