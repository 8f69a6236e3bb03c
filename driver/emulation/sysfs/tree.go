// Package sysfs is an EMULATION of the parts of Linux sysfs the NVMe DRA driver reads
// and writes, for hosts without a PCI bus (the hermetic cluster) and for unit tests.
// It mirrors kubevirtci's `--nvme` layout: QEMU NVMe controllers 1b36:0010, class
// 0x010802, serial nvme-<i>, one IOMMU group each. Nothing here is used by the driver
// itself; it only builds the tree the driver is pointed at and plays the kernel's part.
package sysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Controller describes one emulated NVMe controller.
type Controller struct {
	Slot       int    // PCI slot on bus 0: BDF 0000:00:<slot>.0
	Serial     string // nvme-<i>
	Model      string
	SizeBytes  int64
	IOMMUGroup int
	NUMANode   int
}

// BDF is the controller's PCI address.
func (c Controller) BDF() string { return fmt.Sprintf("0000:00:%02x.0", c.Slot) }

// KubevirtciControllers mirrors `--nvme SIZE` repeated: serials nvme-0.., slots from 5.
func KubevirtciControllers(sizes []int64) []Controller {
	out := make([]Controller, 0, len(sizes))
	for i, size := range sizes {
		out = append(out, Controller{
			Slot: 5 + i, Serial: fmt.Sprintf("nvme-%d", i), Model: QEMUModel,
			SizeBytes: size, IOMMUGroup: 10 + i, NUMANode: -1,
		})
	}
	return out
}

func write(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

func link(target, name string) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	_ = os.Remove(name)
	return os.Symlink(target, name)
}

// Build creates the tree under root with every controller bound to the nvme driver.
func Build(root string, controllers []Controller) error {
	for _, drv := range []string{"nvme", "vfio-pci"} {
		if err := write(filepath.Join(root, "bus/pci/drivers", drv, "unbind"), ""); err != nil {
			return err
		}
		if err := write(filepath.Join(root, "bus/pci/drivers", drv, "bind"), ""); err != nil {
			return err
		}
	}
	if err := write(filepath.Join(root, "bus/pci/drivers_probe"), ""); err != nil {
		return err
	}
	if err := write(filepath.Join(root, "bus/pci/rescan"), ""); err != nil { // write-only
		return err
	}
	for _, c := range controllers {
		bdf := c.BDF()
		dev := filepath.Join(root, "devices/pci0000:00", bdf)
		files := attributes(c)
		files["uevent"] = uevent(bdf, "nvme")
		files["config"] = string(configSpace())
		files["remove"] = "" // write-only: "1" takes the function off the bus
		for name, content := range files {
			if err := write(filepath.Join(dev, name), content); err != nil {
				return err
			}
		}
		if err := link("../../../devices/pci0000:00/"+bdf, filepath.Join(root, "bus/pci/devices", bdf)); err != nil {
			return err
		}
		group := filepath.Join(root, "kernel/iommu_groups", strconv.Itoa(c.IOMMUGroup), "devices")
		if err := link("../../../../devices/pci0000:00/"+bdf, filepath.Join(group, bdf)); err != nil {
			return err
		}
		if err := link("../../../kernel/iommu_groups/"+strconv.Itoa(c.IOMMUGroup), filepath.Join(dev, "iommu_group")); err != nil {
			return err
		}
		if err := writeController(root, c); err != nil {
			return err
		}
		if err := link("../../../bus/pci/drivers/nvme", filepath.Join(dev, "driver")); err != nil {
			return err
		}
	}
	return nil
}

// controllerIndex is the nvme<N> instance number: slots are numbered from 5.
func controllerIndex(c Controller) int { return c.Slot - 5 }

// writeController creates the nvme class entries a bound nvme driver shows. They are
// kept in a stash while the controller is bound elsewhere, as the kernel removes them.
func writeController(root string, c Controller) error {
	name := fmt.Sprintf("nvme%d", controllerIndex(c))
	ctrl := filepath.Join(root, "devices/pci0000:00", c.BDF(), "nvme", name)
	ns := filepath.Join(ctrl, name+"n1")
	files := map[string]string{
		filepath.Join(ctrl, "serial"): c.Serial + "\n",
		filepath.Join(ctrl, "model"):  c.Model + "\n",
		filepath.Join(ns, "size"):     strconv.FormatInt(c.SizeBytes/512, 10) + "\n",
	}
	for path, content := range files {
		if err := write(path, content); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(ns, "holders"), 0o755)
}

// DeviceStateRoot is where a node keeps each function's state (WriteDeviceState's root
// there), and where a container holding the function's VFIO group sees it.
const DeviceStateRoot = "/var/lib/kdc-emulated-pci"

// WriteDeviceState creates what real hardware keeps in the device itself, under
// root/<bdf>: its identity (serial, model) and its media, which persists as a device's
// flash does. The EMULATED VFIO hop gives it to QEMU. Existing media is kept. The media
// is writable by any user, as the EMULATED /dev/vfio nodes are: the launcher's QEMU
// runs as its pod's user.
func WriteDeviceState(root string, c Controller) error {
	dir := filepath.Join(root, c.BDF())
	if err := write(filepath.Join(dir, "serial"), c.Serial+"\n"); err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "model"), c.Model+"\n"); err != nil {
		return err
	}
	media := filepath.Join(dir, "media")
	if _, err := os.Stat(media); err == nil {
		return nil
	}
	f, err := os.OpenFile(media, os.O_CREATE|os.O_WRONLY, 0o666)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(0o666); err != nil { // past the umask
		return err
	}
	return f.Truncate(c.SizeBytes)
}
