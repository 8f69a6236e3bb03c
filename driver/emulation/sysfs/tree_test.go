package sysfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func built(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := Build(root, KubevirtciControllers([]int64{1 << 20})); err != nil {
		t.Fatal(err)
	}
	return root
}

// KubeVirt's PCI device plugin matches functions by uevent's PCI_ID; libvirt reads the
// config space's header type and capabilities.
func TestAFunctionShowsWhatKubeVirtAndLibvirtRead(t *testing.T) {
	root := built(t)
	dev := filepath.Join(root, "bus/pci/devices/0000:00:05.0")
	event, err := os.ReadFile(filepath.Join(dev, "uevent"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"DRIVER=nvme", "PCI_ID=1B36:0010", "PCI_CLASS=10802", "PCI_SLOT_NAME=0000:00:05.0"} {
		if !strings.Contains(string(event), line+"\n") {
			t.Errorf("uevent lacks %q:\n%s", line, event)
		}
	}
	config, err := os.ReadFile(filepath.Join(dev, "config"))
	if err != nil || len(config) != 4096 || config[0x0e] != 0 || config[0x34] != 0x40 {
		t.Fatalf("config: %d bytes, header type %#x, capabilities at %#x: want a 4 KiB endpoint's", len(config), config[0x0e], config[0x34])
	}
	member, err := filepath.EvalSymlinks(filepath.Join(dev, "iommu_group/devices/0000:00:05.0"))
	if want, _ := filepath.EvalSymlinks(dev); err != nil || member != want {
		t.Fatalf("IOMMU group member %q (%v): want the function %q", member, err, want)
	}
}

func TestUeventFollowsTheBoundDriver(t *testing.T) {
	root := built(t)
	const bdf = "0000:00:05.0"
	kernel := Kernel{Root: root}
	kernel.unbind(bdf)
	event, _ := os.ReadFile(filepath.Join(root, "bus/pci/devices", bdf, "uevent"))
	if strings.Contains(string(event), "DRIVER=") {
		t.Fatalf("unbound function still names a driver:\n%s", event)
	}
	kernel.bind(bdf, "vfio-pci")
	event, _ = os.ReadFile(filepath.Join(root, "bus/pci/devices", bdf, "uevent"))
	if !strings.HasPrefix(string(event), "DRIVER=vfio-pci\n") {
		t.Fatalf("uevent after binding vfio-pci:\n%s", event)
	}
}

func TestDeviceStateKeepsItsMedia(t *testing.T) {
	root := t.TempDir()
	c := KubevirtciControllers([]int64{1 << 20})[0]
	if err := WriteDeviceState(root, c); err != nil {
		t.Fatal(err)
	}
	media := filepath.Join(root, c.BDF(), "media")
	if err := os.WriteFile(media, []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := WriteDeviceState(root, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(media); string(got) != "data" {
		t.Fatalf("media after a second start: %q, want the data written before", got)
	}
	serial, _ := os.ReadFile(filepath.Join(root, c.BDF(), "serial"))
	if string(serial) != "nvme-0\n" {
		t.Fatalf("serial %q", serial)
	}
}
