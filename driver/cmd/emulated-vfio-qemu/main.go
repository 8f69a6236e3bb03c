// Command emulated-vfio-qemu is the EMULATED VFIO hop of the hermetic cluster, which
// has no IOMMU: it stands in front of QEMU in the virt-launcher image, as the
// qemu-system-x86_64 that libvirt finds first on its PATH. libvirt, KubeVirt and QEMU
// are unchanged and make every check they make on hardware; only where QEMU would open
// a PCI function through VFIO does this program act: it checks what QEMU's vfio-pci
// would (the function's sysfs entry, its IOMMU group, vfio-pci bound, the group's
// device nodes present and read-write for QEMU's user; no driver is behind them here) and gives the guest QEMU's own NVMe controller in the
// function's place, with the function's serial and backed by its media, so the guest
// sees what passthrough of kubevirtci's emulated NVMe shows. Every other argument,
// and every other QEMU run (libvirt's capability probes), is passed on unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
)

const realQEMU = "/usr/bin/qemu-system-x86_64"

// vfioOnlyProperties are vfio-pci properties that QEMU's nvme device does not have.
var vfioOnlyProperties = []string{"host", "sysfsdev", "rombar", "romfile", "display", "ramfb", "x-vga"}

// host is where the function's kernel interfaces are: sysfs, /dev and its state.
type host struct{ sysfs, dev, deviceState string }

func main() {
	// The node's NRI plugin shows a container the state of the functions whose VFIO
	// group it holds (nri-emulated-pci).
	args, notes, err := host{"/sys", "/dev", sysfs.DeviceStateRoot}.rewrite(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "EMULATED VFIO: %v\n", err)
		os.Exit(1)
	}
	for _, note := range notes {
		fmt.Fprintf(os.Stderr, "EMULATED VFIO: %s\n", note)
	}
	if err := syscall.Exec(realQEMU, append([]string{realQEMU}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "EMULATED VFIO: cannot run %s: %v\n", realQEMU, err)
		os.Exit(1)
	}
}

// rewrite replaces every vfio-pci -device of args and says what it gave the guest.
func (h host) rewrite(args []string) ([]string, []string, error) {
	out := make([]string, 0, len(args))
	var notes []string
	for i := 0; i < len(args); i++ {
		if args[i] != "-device" || i+1 == len(args) {
			out = append(out, args[i])
			continue
		}
		value := args[i+1]
		i++
		if strings.HasPrefix(value, "vfio-pci,") {
			return nil, nil, fmt.Errorf("-device %s: only libvirt's JSON form is understood", value)
		}
		var props map[string]any
		if !strings.HasPrefix(value, "{") || json.Unmarshal([]byte(value), &props) != nil || props["driver"] != "vfio-pci" {
			out = append(out, "-device", value)
			continue
		}
		blockdev, device, note, err := h.nvmeInPlaceOf(props, len(notes))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, "-blockdev", blockdev, "-device", device)
		notes = append(notes, note)
	}
	return out, notes, nil
}

// nvmeInPlaceOf checks the function as QEMU's vfio-pci would open it and returns the
// -blockdev and -device values of QEMU's NVMe controller that stand in for it.
func (h host) nvmeInPlaceOf(props map[string]any, index int) (string, string, string, error) {
	bdf, _ := props["host"].(string)
	if bdf == "" {
		return "", "", "", fmt.Errorf("vfio-pci device %v names no host function", props["id"])
	}
	function := filepath.Join(h.sysfs, "bus/pci/devices", bdf)
	group, err := os.Readlink(filepath.Join(function, "iommu_group"))
	if err != nil {
		return "", "", "", fmt.Errorf("%s: no IOMMU group (%v)", bdf, err)
	}
	if driver, _ := os.Readlink(filepath.Join(function, "driver")); filepath.Base(driver) != "vfio-pci" {
		return "", "", "", fmt.Errorf("%s is not bound to vfio-pci (driver %q)", bdf, filepath.Base(driver))
	}
	// QEMU opens the container and the group read-write. No VFIO driver answers to the
	// EMULATED nodes' numbers (the kernel would say ENXIO), so this hop, the one place
	// that knows it, checks what the open would (present, read-write for QEMU's user)
	// and opens nothing.
	for _, node := range []string{"vfio", filepath.Base(group)} {
		path := filepath.Join(h.dev, "vfio", node)
		if err := unix.Access(path, unix.R_OK|unix.W_OK); err != nil {
			return "", "", "", fmt.Errorf("%s: %s: %v", bdf, path, err)
		}
	}
	// QEMU's NVMe controller is the only device this hop can present.
	vendorID, deviceID := read(function, "vendor"), read(function, "device")
	if !isID(vendorID, sysfs.VendorID) || !isID(deviceID, sysfs.DeviceID) {
		return "", "", "", fmt.Errorf("%s is %s:%s; only QEMU's NVMe controller (%04x:%04x) can be given to the guest here", bdf, vendorID, deviceID, sysfs.VendorID, sysfs.DeviceID)
	}
	state := filepath.Join(h.deviceState, bdf)
	serial, model := read(state, "serial"), read(state, "model")
	if serial == "" || model != sysfs.QEMUModel {
		return "", "", "", fmt.Errorf("%s: the function's state in %s (serial %q, model %q) is missing or not QEMU's NVMe controller's; is the node's NRI plugin nri-emulated-pci running?", bdf, state, serial, model)
	}
	node := fmt.Sprintf("kdc-vfio-%d", index) // QEMU's node names have at most 31 characters
	blockdev, _ := json.Marshal(map[string]any{"driver": "file", "filename": filepath.Join(state, "media"), "node-name": node})
	for _, key := range vfioOnlyProperties {
		delete(props, key)
	}
	props["driver"], props["serial"], props["drive"] = "nvme", serial, node
	device, _ := json.Marshal(props)
	note := fmt.Sprintf("%s (IOMMU group %s) given to the guest as QEMU's NVMe controller, serial %s, media %s; /dev/vfio/vfio and /dev/vfio/%s checked read-write, not opened: no VFIO driver is behind them", bdf, filepath.Base(group), serial, filepath.Join(state, "media"), filepath.Base(group))
	return string(blockdev), string(device), note, nil
}

// isID says whether a sysfs ID attribute ("0x1b36") holds want.
func isID(attribute string, want uint64) bool {
	id, err := strconv.ParseUint(attribute, 0, 16)
	return err == nil && id == want
}

func read(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(b))
}
