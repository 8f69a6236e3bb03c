// Package sysfstest runs an EMULATED machine for a test, as httptest runs a server:
// built in the test's folder, its kernel acting on writes until the test ends, its error
// failing the test.
package sysfstest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
)

// Build makes an EMULATED machine with the controllers under a folder of the test,
// numbered as this host's kernel would number it, and returns its root.
func Build(t testing.TB, controllers []sysfs.Controller) string {
	t.Helper()
	root := t.TempDir()
	devices, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := sysfs.OnlineCPUs(string(online))
	if err != nil {
		t.Fatal(err)
	}
	if err := sysfs.Build(root, controllers, string(devices), cpus); err != nil {
		t.Fatal(err)
	}
	return root
}

// RunKernel acts on the writes to the machine under root until the test ends.
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

// Machine builds a machine with the controllers, runs its kernel for the test, and
// returns the root of its sysfs (what a driver is pointed at as /sys).
func Machine(t testing.TB, controllers []sysfs.Controller) string {
	t.Helper()
	root := Build(t, controllers)
	RunKernel(t, root)
	return filepath.Join(root, sysfs.SysDir)
}
