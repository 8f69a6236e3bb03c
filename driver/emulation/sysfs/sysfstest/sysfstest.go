// Package sysfstest runs the EMULATED kernel over a test's tree, as httptest runs a
// server: started for the test, stopped when it ends, its error failing the test.
package sysfstest

import (
	"context"
	"testing"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
)

// RunKernel acts on the writes to the tree under root until the test ends.
func RunKernel(t testing.TB, root string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- sysfs.Kernel{Root: root}.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
	})
}
