// Package pci reads PCI functions from a sysfs tree and moves them between kernel
// drivers. The sysfs root is a parameter so the same code runs against the real /sys
// and against an emulated tree (the hermetic cluster, unit tests).
package pci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// NVMeClass is the PCI class of NVM Express controllers (mass storage, NVM, NVMe).
const NVMeClass = "0x010802"

// Function is one PCI function as sysfs shows it.
type Function struct {
	BDF        string // 0000:00:05.0
	Class      string
	VendorID   string // 1b36
	DeviceID   string // 0010
	NUMANode   int    // -1 when the platform reports none
	IOMMUGroup int    // -1 without an IOMMU
	Driver     string // bound kernel driver, "" when unbound
	Serial     string // NVMe controller serial, "" when not bound to nvme
	Model      string
	Namespaces []Namespace
}

// Namespace is an NVMe namespace block device of a controller.
type Namespace struct {
	Name      string // nvme0n1
	SizeBytes int64
	Holders   []string // block devices stacked on it (dm, md)
}

// Sysfs is a sysfs tree rooted at Root ("/sys" on a real node).
type Sysfs struct {
	Root string
}

func (s Sysfs) devicesDir() string { return filepath.Join(s.Root, "bus", "pci", "devices") }

// DevicePath is the sysfs directory of a PCI function.
func (s Sysfs) DevicePath(bdf string) string { return filepath.Join(s.devicesDir(), bdf) }

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

func readInt(path string, fallback int) int {
	v, err := readTrim(path)
	if err != nil {
		return fallback
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fallback
	}
	return n
}

// ScanClass returns every PCI function of the given class, sorted by address.
func (s Sysfs) ScanClass(class string) ([]Function, error) {
	entries, err := os.ReadDir(s.devicesDir())
	if err != nil {
		return nil, fmt.Errorf("reading PCI devices under %s: %w", s.Root, err)
	}
	var out []Function
	for _, e := range entries {
		fn, err := s.Read(e.Name())
		if err != nil {
			return nil, err
		}
		if fn.Class == class {
			out = append(out, fn)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BDF < out[j].BDF })
	return out, nil
}

// Read reads one PCI function.
func (s Sysfs) Read(bdf string) (Function, error) {
	dir := s.DevicePath(bdf)
	class, err := readTrim(filepath.Join(dir, "class"))
	if err != nil {
		return Function{}, fmt.Errorf("reading class of %s: %w", bdf, err)
	}
	vendor, _ := readTrim(filepath.Join(dir, "vendor"))
	device, _ := readTrim(filepath.Join(dir, "device"))
	fn := Function{
		BDF:        bdf,
		Class:      class,
		VendorID:   strings.TrimPrefix(vendor, "0x"),
		DeviceID:   strings.TrimPrefix(device, "0x"),
		NUMANode:   readInt(filepath.Join(dir, "numa_node"), -1),
		IOMMUGroup: -1,
		Driver:     s.BoundDriver(bdf),
	}
	if target, err := os.Readlink(filepath.Join(dir, "iommu_group")); err == nil {
		if n, err := strconv.Atoi(filepath.Base(target)); err == nil {
			fn.IOMMUGroup = n
		}
	}
	if ctrl := s.controllerOf(dir); ctrl != "" {
		fn.Serial, _ = readTrim(filepath.Join(ctrl, "serial"))
		fn.Model, _ = readTrim(filepath.Join(ctrl, "model"))
		for _, ns := range s.namespacesOf(ctrl) {
			holders, _ := os.ReadDir(filepath.Join(ns, "holders"))
			var names []string
			for _, h := range holders {
				names = append(names, h.Name())
			}
			sectors := readInt(filepath.Join(ns, "size"), 0)
			fn.Namespaces = append(fn.Namespaces, Namespace{
				Name: filepath.Base(ns), SizeBytes: int64(sectors) * 512, Holders: names,
			})
		}
	}
	return fn, nil
}

// controllerOf finds the function's NVMe controller as NVMe tooling does: the nvme
// class device whose device link is the function. "" while nvme does not drive it.
func (s Sysfs) controllerOf(function string) string {
	want, err := filepath.EvalSymlinks(function)
	if err != nil {
		return ""
	}
	controllers, _ := filepath.Glob(filepath.Join(s.Root, "class", "nvme", "nvme*"))
	sort.Strings(controllers)
	for _, ctrl := range controllers {
		if device, err := filepath.EvalSymlinks(filepath.Join(ctrl, "device")); err == nil && device == want {
			return ctrl
		}
	}
	return ""
}

// namespacesOf are the controller's namespaces as the block class shows them: the
// disks whose device folder is below the controller's.
func (s Sysfs) namespacesOf(ctrl string) []string {
	dir, err := filepath.EvalSymlinks(ctrl)
	if err != nil {
		return nil
	}
	disks, _ := filepath.Glob(filepath.Join(s.Root, "block", "*"))
	sort.Strings(disks)
	var out []string
	for _, disk := range disks {
		if real, err := filepath.EvalSymlinks(disk); err == nil && strings.HasPrefix(real, dir+"/") {
			out = append(out, real)
		}
	}
	return out
}

// BoundDriver is the name of the kernel driver bound to the function, or "".
func (s Sysfs) BoundDriver(bdf string) string {
	target, err := os.Readlink(filepath.Join(s.DevicePath(bdf), "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// IOMMUGroup reads the function's IOMMU group number, -1 if it has none.
func (s Sysfs) IOMMUGroup(bdf string) int {
	target, err := os.Readlink(filepath.Join(s.DevicePath(bdf), "iommu_group"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(filepath.Base(target))
	if err != nil {
		return -1
	}
	return n
}

// Present tells whether the function is on the bus (its sysfs entry exists).
func (s Sysfs) Present(bdf string) bool {
	_, err := os.Lstat(s.DevicePath(bdf))
	return err == nil
}

// Problem says what is wrong with a function as the kernel shows it, or "" when
// nothing is: gone from the bus (surprise removal, or a write to its "remove"),
// configuration reads answered with all ones (it fell off the bus), or an nvme
// controller its driver declared dead.
func (s Sysfs) Problem(bdf string) string {
	dir := s.DevicePath(bdf)
	config, err := os.ReadFile(filepath.Join(dir, "config"))
	if errors.Is(err, os.ErrNotExist) {
		return "removed from the PCI bus"
	}
	if err != nil {
		return "configuration space unreadable: " + err.Error()
	}
	if len(config) >= 2 && config[0] == 0xff && config[1] == 0xff {
		return "configuration space reads all ones: the function fell off the bus"
	}
	states, _ := filepath.Glob(filepath.Join(dir, "nvme", "nvme*", "state"))
	for _, path := range states {
		if state, _ := readTrim(path); state == "dead" {
			return "the nvme driver declared controller " + filepath.Base(filepath.Dir(path)) + " dead"
		}
	}
	return ""
}
