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
