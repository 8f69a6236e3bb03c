//go:build tools

// Package tools names the program of vmware-tanzu/sonobuoy that this module builds: the
// Sonobuoy that runs the suite's plugin on the hermetic cluster (scripts/sonobuoy_run.py).
package tools

import (
	_ "github.com/vmware-tanzu/sonobuoy"
)
