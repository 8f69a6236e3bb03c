package sysfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// KubeVirt's PCI device plugin matches functions by uevent's PCI_ID; libvirt reads the
// config space's header type and capabilities; NVMe tooling finds controllers through
// the nvme class and their disks through the block class.
func TestAFunctionShowsWhatKubeVirtLibvirtAndNVMeToolingRead(t *testing.T) {
	root := machineRoot(t, 1<<30)
	sys := filepath.Join(root, SysDir)
	dev := filepath.Join(sys, "bus/pci/devices/0000:00:05.0")
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
	controller, err := filepath.EvalSymlinks(filepath.Join(sys, "class/nvme/nvme0/device"))
	if want, _ := filepath.EvalSymlinks(dev); err != nil || controller != want {
		t.Fatalf("class/nvme/nvme0/device is %q (%v): want the function %q", controller, err, want)
	}
	serial, _ := os.ReadFile(filepath.Join(sys, "class/nvme/nvme0/serial"))
	size, _ := os.ReadFile(filepath.Join(sys, "block/nvme0n1/size"))
	if strings.TrimSpace(string(serial)) != "nvme-0" || strings.TrimSpace(string(size)) != "2097152" {
		t.Fatalf("serial %q, size %q: want nvme-0 and 1 GiB in sectors", serial, size)
	}
}

// The uevent says DRIVER= while a driver holds the function, and which.
func TestUeventFollowsTheBoundDriver(t *testing.T) {
	root := machineRoot(t, 1<<20)
	sys := filepath.Join(root, SysDir)
	const bdf = "0000:00:05.0"
	dev := filepath.Join(sys, "bus/pci/devices", bdf)
	uevent := func() string { b, _ := os.ReadFile(filepath.Join(dev, "uevent")); return string(b) }
	writeAll(t, [][2]string{{filepath.Join(sys, "bus/pci/drivers/nvme/unbind"), bdf}})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(uevent(), "DRIVER=") {
		t.Fatalf("unbound function still names a driver:\n%s", uevent())
	}
	writeAll(t, [][2]string{{filepath.Join(dev, "driver_override"), "vfio-pci"}, {filepath.Join(sys, "bus/pci/drivers/vfio-pci/bind"), bdf}})
	if err := (Kernel{Root: root}).Step(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(uevent(), "DRIVER=vfio-pci\n") {
		t.Fatalf("uevent after binding vfio-pci:\n%s", uevent())
	}
}

// Functions on NUMA nodes show the node and its CPUs, as the kernel does.
func TestAFunctionOnANUMANodeShowsItsNodeAndCPUs(t *testing.T) {
	root := t.TempDir()
	devices, _ := os.ReadFile("/proc/devices")
	controllers := KubevirtciControllers([]int64{1 << 20, 1 << 20})
	controllers[0].NUMANode, controllers[1].NUMANode = 0, 1
	if err := Build(root, controllers, string(devices), []int{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(root, SysDir, "bus/pci/devices/0000:00:06.0")
	for name, want := range map[string]string{"numa_node": "1\n", "local_cpulist": "2-3\n", "local_cpus": "c\n"} {
		if got, _ := os.ReadFile(filepath.Join(dev, name)); string(got) != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
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
