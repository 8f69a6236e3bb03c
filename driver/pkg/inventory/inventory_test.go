package inventory

import (
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs/sysfstest"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

func tree(t *testing.T, n int) pci.Sysfs {
	t.Helper()
	sizes := make([]int64, n)
	for i := range sizes {
		sizes[i] = 1 << 30
	}
	root := sysfstest.Build(t, sysfs.KubevirtciControllers(sizes))
	return pci.Sysfs{Root: filepath.Join(root, sysfs.SysDir)}
}

func hostFiles(t *testing.T, mounts, swaps string) Host {
	t.Helper()
	dir := t.TempDir()
	h := Host{MountsFile: filepath.Join(dir, "mounts"), SwapsFile: filepath.Join(dir, "swaps")}
	if err := os.WriteFile(h.MountsFile, []byte(mounts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.SwapsFile, []byte(swaps), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

const plainMounts = "/dev/vda / ext4 rw 0 0\nproc /proc proc rw 0 0\n"
const swapHeader = "Filename Type Size Used Priority\n"

func TestDiscoverListsEveryFreeController(t *testing.T) {
	devices, excluded, err := Discover(tree(t, 2), hostFiles(t, plainMounts, swapHeader), nil, deviceattribute.ScalarAttribute)
	if err != nil {
		t.Fatal(err)
	}
	if len(excluded) != 0 || len(devices) != 2 {
		t.Fatalf("devices %v excluded %v", devices, excluded)
	}
	d := devices[0]
	if d.Name != "nvme-0000-00-05-0" || d.Function.Serial != "nvme-0" {
		t.Fatalf("unexpected device %+v", d)
	}
	attrs := d.Attributes()
	want := map[string]string{
		"resource.kubernetes.io/pciBusID": "0000:00:05.0",
		"resource.kubernetes.io/pcieRoot": "pci0000:00",
		"serial":                          "nvme-0", "vendorID": "1b36", "deviceID": "0010", "model": "QEMU NVMe Ctrl",
	}
	for name, value := range want {
		got := attrs[toQualified(name)].StringValue
		if got == nil || *got != value {
			t.Errorf("attribute %s = %v, want %s", name, got, value)
		}
	}
	if g := attrs["iommuGroup"].IntValue; g == nil || *g != 10 {
		t.Errorf("iommuGroup = %v", g)
	}
	if _, ok := attrs["resource.kubernetes.io/numaNode"]; ok {
		t.Errorf("numaNode must be absent when sysfs reports -1")
	}
	size := d.APIDevice().Capacity["size"].Value
	if size.Value() != 1<<30 {
		t.Errorf("size capacity = %s", size.String())
	}
}

func TestDiscoverPublishesTheStandardNUMANodeFromSysfs(t *testing.T) {
	sys := tree(t, 1)
	if err := os.WriteFile(filepath.Join(sys.DevicePath("0000:00:05.0"), "numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	devices, _, err := Discover(sys, hostFiles(t, plainMounts, swapHeader), nil, deviceattribute.ScalarAttribute)
	if err != nil {
		t.Fatal(err)
	}
	if n := devices[0].Attributes()["resource.kubernetes.io/numaNode"].IntValue; n == nil || *n != 1 {
		t.Fatalf("numaNode = %v, want 1", n)
	}
}

func TestDiscoverNeverAdvertisesTheRootDiskOrSwap(t *testing.T) {
	mounts := plainMounts + "/dev/nvme0n1p2 / ext4 rw 0 0\n"
	swaps := swapHeader + "/dev/nvme1n1 partition 1024 0 -2\n"
	devices, excluded, err := Discover(tree(t, 3), hostFiles(t, mounts, swaps), nil, deviceattribute.ScalarAttribute)
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 1 || devices[0].Function.Serial != "nvme-2" {
		t.Fatalf("only nvme-2 is free, got %+v", devices)
	}
	if len(excluded) != 2 || excluded[0].BDF != "0000:00:05.0" || excluded[1].BDF != "0000:00:06.0" {
		t.Fatalf("excluded %+v", excluded)
	}
}

func TestDiscoverSkipsHeldNamespacesAndForeignVFIOBindings(t *testing.T) {
	sys := tree(t, 2)
	holders := filepath.Join(sys.DevicePath("0000:00:05.0"), "nvme/nvme0/nvme0n1/holders/dm-0")
	if err := os.MkdirAll(holders, 0o755); err != nil {
		t.Fatal(err)
	}
	driverLink := filepath.Join(sys.DevicePath("0000:00:06.0"), "driver")
	_ = os.Remove(driverLink)
	if err := os.Symlink("../../../bus/pci/drivers/vfio-pci", driverLink); err != nil {
		t.Fatal(err)
	}
	devices, excluded, err := Discover(sys, hostFiles(t, plainMounts, swapHeader), nil, deviceattribute.ScalarAttribute)
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 0 || len(excluded) != 2 {
		t.Fatalf("devices %+v excluded %+v", devices, excluded)
	}
}

func TestDiscoverKeepsOwnedControllersWithTheirCachedIdentity(t *testing.T) {
	sys := tree(t, 1)
	owned, _ := sys.Read("0000:00:05.0")
	// Bound to vfio-pci by the driver: sysfs no longer shows the serial.
	_ = os.RemoveAll(filepath.Join(sys.DevicePath("0000:00:05.0"), "nvme"))
	link := filepath.Join(sys.DevicePath("0000:00:05.0"), "driver")
	_ = os.Remove(link)
	_ = os.Symlink("../../../bus/pci/drivers/vfio-pci", link)
	devices, _, err := Discover(sys, hostFiles(t, plainMounts, swapHeader),
		map[string]pci.Function{owned.BDF: owned}, deviceattribute.ScalarAttribute)
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 1 || devices[0].Function.Serial != "nvme-0" || devices[0].Function.Driver != "vfio-pci" {
		t.Fatalf("got %+v", devices)
	}
}

func TestBelongsTo(t *testing.T) {
	cases := map[[2]string]bool{
		{"nvme0n1", "nvme0n1"}: true, {"nvme0n1p3", "nvme0n1"}: true,
		{"nvme0n10", "nvme0n1"}: false, {"nvme0n1p", "nvme0n1"}: false,
	}
	for args, want := range cases {
		if got := belongsTo(args[0], args[1]); got != want {
			t.Errorf("belongsTo(%q, %q) = %v", args[0], args[1], got)
		}
	}
}

func toQualified(name string) resourceapi.QualifiedName { return resourceapi.QualifiedName(name) }
