//go:build tools

// Package tools names the Helm program this module builds (it renders upstream charts).
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
