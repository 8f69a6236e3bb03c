package pci_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs/sysfstest"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

// emulatedNode builds a one-controller tree with the emulated kernel running.
func emulatedNode(t *testing.T) (pci.Sysfs, pci.Binder) {
	t.Helper()
	sys := pci.Sysfs{Root: sysfstest.Machine(t, sysfs.KubevirtciControllers([]int64{1 << 30}))}
	return sys, pci.Binder{Sysfs: sys, Settle: 2 * time.Second}
}

func TestBindToVFIOAndRestore(t *testing.T) {
	sys, binder := emulatedNode(t)
	const bdf = "0000:00:05.0"
	previous, err := binder.Bind(bdf, pci.VFIODriver)
	if err != nil || previous != "nvme" {
		t.Fatalf("Bind = %q, %v", previous, err)
	}
	fn, _ := sys.Read(bdf)
	if fn.Driver != pci.VFIODriver || fn.Serial != "" {
		t.Fatalf("after bind: driver %q serial %q (the nvme class device must be gone)", fn.Driver, fn.Serial)
	}
	again, err := binder.Bind(bdf, pci.VFIODriver)
	if err != nil || again != pci.VFIODriver {
		t.Fatalf("second Bind must be a no-op, got %q, %v", again, err)
	}
	if err := binder.Restore(bdf, previous); err != nil {
		t.Fatal(err)
	}
	fn, _ = sys.Read(bdf)
	if fn.Driver != "nvme" || fn.Serial != "nvme-0" {
		t.Fatalf("after restore: driver %q serial %q", fn.Driver, fn.Serial)
	}
}

func TestBindFailsClearlyWithoutAKernel(t *testing.T) {
	root := sysfstest.Build(t, sysfs.KubevirtciControllers([]int64{1 << 30}))
	sys := pci.Sysfs{Root: filepath.Join(root, sysfs.SysDir)}
	_, err := pci.Binder{Sysfs: sys, Settle: 50 * time.Millisecond}.Bind("0000:00:05.0", pci.VFIODriver)
	if err == nil {
		t.Fatal("a bind nobody acts on must fail, not hang or pretend")
	}
}
