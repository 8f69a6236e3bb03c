package sysfs

import (
	"os"
	"path/filepath"
	"testing"
)

// A writer's unbind and probe can both be pending when the stand-in polls; it must apply
// them in the writer's order, as the kernel does synchronously.
func TestPendingUnbindAndProbeAreAppliedInOrder(t *testing.T) {
	root := t.TempDir()
	if err := Build(root, KubevirtciControllers([]int64{1 << 20})); err != nil {
		t.Fatal(err)
	}
	const bdf = "0000:00:05.0"
	dev := filepath.Join(root, "bus/pci/devices", bdf)
	for path, value := range map[string]string{
		filepath.Join(dev, "driver_override"):              "vfio-pci",
		filepath.Join(root, "bus/pci/drivers/nvme/unbind"): bdf,
		filepath.Join(root, "bus/pci/drivers_probe"):       bdf,
	} {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Kernel{Root: root}.Step()
	target, err := os.Readlink(filepath.Join(dev, "driver"))
	if err != nil || filepath.Base(target) != "vfio-pci" {
		t.Fatalf("driver link %q, %v: want vfio-pci after one step", target, err)
	}
	if _, err := os.Stat(filepath.Join(dev, "nvme")); !os.IsNotExist(err) {
		t.Fatal("the nvme class device must be gone while vfio-pci holds the function")
	}
}

// Writing 1 to a function's remove takes it off the bus: its folder and the links to it
// go, the other functions stay.
func TestRemoveTakesOnlyThatFunctionOffTheBus(t *testing.T) {
	root := t.TempDir()
	if err := Build(root, KubevirtciControllers([]int64{1 << 20, 1 << 20})); err != nil {
		t.Fatal(err)
	}
	const bdf = "0000:00:05.0"
	if err := os.WriteFile(filepath.Join(root, "bus/pci/devices", bdf, "remove"), []byte("1"), 0o200); err != nil {
		t.Fatal(err)
	}
	Kernel{Root: root}.Step()
	for _, gone := range []string{
		filepath.Join(root, "bus/pci/devices", bdf),
		filepath.Join(root, "devices/pci0000:00", bdf),
		filepath.Join(root, "kernel/iommu_groups/10/devices", bdf),
	} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s must be gone", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "bus/pci/devices/0000:00:06.0/config")); err != nil {
		t.Errorf("the other function must stay: %v", err)
	}
}

// A rescan finds a removed function again: back on the bus and in its IOMMU group,
// bound to its native driver with its class device, whatever bound it before.
func TestRescanBringsARemovedFunctionBackToItsNativeDriver(t *testing.T) {
	root := t.TempDir()
	if err := Build(root, KubevirtciControllers([]int64{1 << 20})); err != nil {
		t.Fatal(err)
	}
	const bdf = "0000:00:05.0"
	dev := filepath.Join(root, "bus/pci/devices", bdf)
	for _, step := range [][2]string{
		{filepath.Join(dev, "driver_override"), "vfio-pci"},
		{filepath.Join(root, "bus/pci/drivers/nvme/unbind"), bdf},
		{filepath.Join(root, "bus/pci/drivers_probe"), bdf},
		{filepath.Join(dev, "remove"), "1"},
		{filepath.Join(root, "bus/pci/rescan"), "1"},
	} {
		if err := os.WriteFile(step[0], []byte(step[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		Kernel{Root: root}.Step()
	}
	target, err := os.Readlink(filepath.Join(dev, "driver"))
	if err != nil || filepath.Base(target) != "nvme" {
		t.Fatalf("driver link %q, %v: want the native nvme driver after a rescan", target, err)
	}
	if override := readOverride(dev); override != "" {
		t.Errorf("driver_override %q survived the removal", override)
	}
	for _, back := range []string{
		filepath.Join(dev, "nvme/nvme0/serial"),
		filepath.Join(root, "kernel/iommu_groups/10/devices", bdf, "config"),
	} {
		if _, err := os.Stat(back); err != nil {
			t.Errorf("%s must be back: %v", back, err)
		}
	}
}
