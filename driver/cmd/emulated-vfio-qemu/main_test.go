package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs/sysfstest"
)

const bdf = "0000:00:05.0"

// fixture is a node's view with one NVMe controller bound to vfio-pci.
func fixture(t *testing.T) host {
	t.Helper()
	controller := sysfs.KubevirtciControllers([]int64{1 << 20})[0]
	root := sysfstest.Build(t, []sysfs.Controller{controller})
	h := host{filepath.Join(root, sysfs.SysDir), filepath.Join(root, sysfs.DevDir), filepath.Join(root, "state")}
	if err := sysfs.WriteDeviceState(h.deviceState, controller); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(h.sysfs, "bus/pci/devices", bdf)
	for path, value := range map[string]string{
		filepath.Join(dev, "driver_override"):                 "vfio-pci",
		filepath.Join(h.sysfs, "bus/pci/drivers/nvme/unbind"): bdf,
		filepath.Join(h.sysfs, "bus/pci/drivers_probe"):       bdf,
	} {
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := (sysfs.Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	return h
}

// libvirt 11.3's argument for a managed='no' PCI hostdev (qemuBuildPCIHostdevDevProps).
const libvirtHostdev = `{"driver":"vfio-pci","host":"0000:00:05.0","id":"ua-dra-hostdevice-nvme","bus":"pci.7","addr":"0x0"}`

func TestAVFIOFunctionBecomesQEMUsNVMeControllerWithItsSerialAndMedia(t *testing.T) {
	h := fixture(t)
	args, notes, err := h.rewrite([]string{"-name", "guest=vm", "-device", libvirtHostdev, "-device", `{"driver":"virtio-rng-pci"}`})
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 8 || args[2] != "-blockdev" || args[4] != "-device" || args[7] != `{"driver":"virtio-rng-pci"}` {
		t.Fatalf("args %q", args)
	}
	var blockdev, device map[string]any
	_ = json.Unmarshal([]byte(args[3]), &blockdev)
	_ = json.Unmarshal([]byte(args[5]), &device)
	if blockdev["filename"] != filepath.Join(h.deviceState, bdf, "media") || blockdev["node-name"] != device["drive"] {
		t.Fatalf("blockdev %v for device %v", blockdev, device)
	}
	want := map[string]any{"driver": "nvme", "serial": "nvme-0", "id": "ua-dra-hostdevice-nvme", "bus": "pci.7", "addr": "0x0", "drive": "kdc-vfio-0"}
	if len(device) != len(want) {
		t.Fatalf("device %v, want %v", device, want)
	}
	for key, value := range want {
		if device[key] != value {
			t.Fatalf("device %v, want %v", device, want)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "serial nvme-0") {
		t.Fatalf("notes %q", notes)
	}
}

func TestAFunctionNotBoundToVFIOIsRefusedAsQEMUWould(t *testing.T) {
	h := fixture(t)
	driver := filepath.Join(h.sysfs, "bus/pci/devices", bdf, "driver")
	_ = os.Remove(driver)
	_ = os.Symlink("../../../bus/pci/drivers/nvme", driver)
	if _, _, err := h.rewrite([]string{"-device", libvirtHostdev}); err == nil || !strings.Contains(err.Error(), "not bound to vfio-pci") {
		t.Fatalf("err %v", err)
	}
}

func TestAGroupNodeMissingFromTheContainerIsRefused(t *testing.T) {
	h := fixture(t)
	_ = os.Remove(filepath.Join(h.dev, "vfio", "10"))
	if _, _, err := h.rewrite([]string{"-device", libvirtHostdev}); err == nil || !strings.Contains(err.Error(), "vfio/10") {
		t.Fatalf("err %v", err)
	}
}

func TestArgumentsWithoutVFIOPassUnchanged(t *testing.T) {
	in := []string{"-S", "-no-user-config", "-machine", "none", "-device", "nvme,help"}
	out, notes, err := (host{}).rewrite(in)
	if err != nil || strings.Join(out, " ") != strings.Join(in, " ") || notes != nil {
		t.Fatalf("out %q notes %q err %v", out, notes, err)
	}
}
