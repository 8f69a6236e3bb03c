package sysfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs/sysfstest"
)

// Run acts on a write as it lands, as the kernel does before write(2) returns: a writer
// that unbinds, overrides and probes finds vfio-pci bound without anyone stepping, and a
// function taken off the bus and found again by a rescan can be removed once more.
func TestRunActsOnWritesAsTheyLand(t *testing.T) {
	root := sysfstest.Machine(t, sysfs.KubevirtciControllers([]int64{1 << 20, 1 << 20}))
	const bdf = "0000:00:05.0"
	dev := filepath.Join(root, "bus/pci/devices", bdf)
	write := func(path, value string) {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil := func(what string, done func() bool) {
		deadline := time.Now().Add(10 * time.Second)
		for !done() {
			if time.Now().After(deadline) {
				t.Fatalf("not acted on: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	boundTo := func(drv string) func() bool {
		return func() bool {
			target, _ := os.Readlink(filepath.Join(dev, "driver"))
			return filepath.Base(target) == drv
		}
	}
	offTheBus := func() bool { _, err := os.Lstat(dev); return os.IsNotExist(err) }

	write(filepath.Join(root, "bus/pci/drivers/nvme/unbind"), bdf)
	write(filepath.Join(dev, "driver_override"), "vfio-pci")
	write(filepath.Join(root, "bus/pci/drivers_probe"), bdf)
	waitUntil("bind to vfio-pci", boundTo("vfio-pci"))
	for round := 1; round <= 2; round++ {
		write(filepath.Join(dev, "remove"), "1")
		waitUntil(fmt.Sprintf("remove, round %d", round), offTheBus)
		write(filepath.Join(root, "bus/pci/rescan"), "1")
		waitUntil(fmt.Sprintf("rescan, round %d", round), boundTo("nvme"))
	}
}
