package sysfs

import (
	"os"
	"path/filepath"
	"testing"
)

// machineRoot builds an EMULATED machine with kubevirtci's controllers of these sizes.
func machineRoot(t *testing.T, sizes ...int64) string {
	t.Helper()
	root := t.TempDir()
	devices, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	if err := Build(root, KubevirtciControllers(sizes), string(devices), []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	return root
}

func writeAll(t *testing.T, writes [][2]string) {
	t.Helper()
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func boundDriver(t *testing.T, dev string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dev, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// A writer's override, unbind and probe can all be pending when the stand-in wakes; it
// must apply them in the writer's order, as the kernel does synchronously.
func TestPendingUnbindAndProbeAreAppliedInOrder(t *testing.T) {
	root := machineRoot(t, 1<<20)
	sys := filepath.Join(root, SysDir)
	const bdf = "0000:00:05.0"
	dev := filepath.Join(sys, "bus/pci/devices", bdf)
	writeAll(t, [][2]string{
		{filepath.Join(dev, "driver_override"), "vfio-pci"},
		{filepath.Join(sys, "bus/pci/drivers/nvme/unbind"), bdf},
		{filepath.Join(sys, "bus/pci/drivers_probe"), bdf},
	})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	if got := boundDriver(t, dev); got != "vfio-pci" {
		t.Fatalf("driver %q: want vfio-pci after one step", got)
	}
	for _, gone := range []string{filepath.Join(dev, "nvme"), filepath.Join(sys, "class/nvme/nvme0"),
		filepath.Join(sys, "block/nvme0n1"), filepath.Join(root, DevDir, "nvme0n1")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s must be gone while vfio-pci holds the function", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(root, DevDir, "vfio/10")); err != nil {
		t.Errorf("the group's VFIO node must appear: %v", err)
	}
}

// vfio-pci has no ID table: without driver_override naming it, a probe gives the
// function back to nvme, and an explicit bind to vfio-pci is refused.
func TestVFIOPCITakesOnlyAFunctionWhoseOverrideNamesIt(t *testing.T) {
	root := machineRoot(t, 1<<20)
	sys := filepath.Join(root, SysDir)
	const bdf = "0000:00:05.0"
	dev := filepath.Join(sys, "bus/pci/devices", bdf)
	writeAll(t, [][2]string{
		{filepath.Join(sys, "bus/pci/drivers/nvme/unbind"), bdf},
		{filepath.Join(sys, "bus/pci/drivers/vfio-pci/bind"), bdf},
	})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	if got := boundDriver(t, dev); got != "" {
		t.Fatalf("driver %q: vfio-pci must refuse a function without the override", got)
	}
	writeAll(t, [][2]string{{filepath.Join(sys, "bus/pci/drivers_probe"), bdf}})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	if got := boundDriver(t, dev); got != "nvme" {
		t.Fatalf("driver %q: a probe without override must find nvme", got)
	}
}

// Writing 1 to a function's remove takes it off the bus: its folder and the links to it
// go, the other functions stay; a rescan brings it back to its native driver, without
// the override it had.
func TestRemoveAndRescan(t *testing.T) {
	root := machineRoot(t, 1<<20, 1<<20)
	sys := filepath.Join(root, SysDir)
	const bdf = "0000:00:05.0"
	dev := filepath.Join(sys, "bus/pci/devices", bdf)
	writeAll(t, [][2]string{{filepath.Join(dev, "driver_override"), "vfio-pci"}, {filepath.Join(dev, "remove"), "1"}})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{dev, filepath.Join(sys, "devices/pci0000:00", bdf),
		filepath.Join(sys, "kernel/iommu_groups/10"), filepath.Join(sys, "class/nvme/nvme0")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s must be gone", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(sys, "bus/pci/devices/0000:00:06.0/config")); err != nil {
		t.Errorf("the other function must stay: %v", err)
	}
	writeAll(t, [][2]string{{filepath.Join(sys, "bus/pci/rescan"), "1"}})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	if got := boundDriver(t, dev); got != "nvme" {
		t.Fatalf("driver %q after a rescan: want the native nvme", got)
	}
	override, _ := os.ReadFile(filepath.Join(dev, "driver_override"))
	if string(override) != "(null)\n" {
		t.Errorf("driver_override %q survived the removal", override)
	}
	if _, err := os.Stat(filepath.Join(dev, "iommu_group/devices", bdf, "nvme/nvme0/serial")); err != nil {
		t.Errorf("the function must be back in its group with its controller: %v", err)
	}
}
