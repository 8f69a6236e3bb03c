package sysfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// Kernel is the EMULATED kernel side of driver binding and hot removal: it reacts to
// writes to driver_override, drivers/<drv>/unbind, drivers/<drv>/bind, drivers_probe,
// a device's remove and the bus's rescan as Linux does
// (Documentation/ABI/testing/sysfs-bus-pci).
type Kernel struct {
	Root string
}

var knownDrivers = []string{"nvme", "vfio-pci"}

func (k Kernel) stash(bdf string) string { return filepath.Join(k.Root, ".emulation", bdf, "nvme") }

func (k Kernel) device(bdf string) string { return filepath.Join(k.Root, "bus/pci/devices", bdf) }

// takeRequest reads a write-only attribute and clears it, returning what was written.
func takeRequest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return ""
	}
	_ = os.WriteFile(path, nil, 0o644)
	return strings.TrimSpace(string(b))
}

func (k Kernel) unbind(bdf string) {
	dev := k.device(bdf)
	target, err := os.Readlink(filepath.Join(dev, "driver"))
	if err != nil {
		return
	}
	if filepath.Base(target) == "nvme" {
		// The nvme driver's class device goes away with the binding.
		_ = os.MkdirAll(filepath.Dir(k.stash(bdf)), 0o755)
		_ = os.RemoveAll(k.stash(bdf))
		_ = os.Rename(filepath.Join(dev, "nvme"), k.stash(bdf))
	}
	_ = os.Remove(filepath.Join(dev, "driver"))
	_ = os.WriteFile(filepath.Join(dev, "uevent"), []byte(uevent(bdf, "")), 0o644)
}

func (k Kernel) bind(bdf, drv string) {
	dev := k.device(bdf)
	if _, err := os.Lstat(filepath.Join(dev, "driver")); err == nil {
		return // already bound: the kernel refuses a second driver
	}
	override := readOverride(dev)
	if override != "" && override != drv {
		return // driver_override restricts which driver may bind
	}
	_ = os.Symlink("../../../bus/pci/drivers/"+drv, filepath.Join(dev, "driver"))
	_ = os.WriteFile(filepath.Join(dev, "uevent"), []byte(uevent(bdf, drv)), 0o644)
	if drv == "nvme" {
		_ = os.Rename(k.stash(bdf), filepath.Join(dev, "nvme"))
	}
}

// removed is where a function taken off the bus waits in its slot for a rescan.
func (k Kernel) removed(bdf string) string {
	return filepath.Join(k.Root, ".emulation", "removed", bdf)
}

// remove takes the function off the bus: its driver lets go of it, and its device
// folder and every link to it go. The hardware stays in its slot, for a rescan.
func (k Kernel) remove(bdf string) {
	dev, err := filepath.EvalSymlinks(k.device(bdf))
	if err != nil {
		return
	}
	k.unbind(bdf)
	if group, err := filepath.EvalSymlinks(filepath.Join(dev, "iommu_group")); err == nil {
		_ = os.Remove(filepath.Join(group, "devices", bdf))
	}
	_ = os.Remove(k.device(bdf))
	_ = os.MkdirAll(filepath.Dir(k.removed(bdf)), 0o755)
	_ = os.RemoveAll(k.removed(bdf))
	_ = os.Rename(dev, k.removed(bdf))
}

// rescan finds every removed function in its slot again, as a write of 1 to
// bus/pci/rescan does: each comes back in its IOMMU group, without a driver_override (a
// new pci_dev has none), probed by its native driver.
func (k Kernel) rescan() {
	slots, _ := os.ReadDir(filepath.Join(k.Root, ".emulation", "removed"))
	for _, slot := range slots {
		bdf := slot.Name()
		dev := filepath.Join(k.Root, "devices/pci0000:00", bdf)
		if err := os.Rename(k.removed(bdf), dev); err != nil {
			continue
		}
		_ = os.Symlink("../../../devices/pci0000:00/"+bdf, k.device(bdf))
		if group, err := filepath.EvalSymlinks(filepath.Join(dev, "iommu_group")); err == nil {
			_ = os.Symlink("../../../../devices/pci0000:00/"+bdf, filepath.Join(group, "devices", bdf))
		}
		_ = os.WriteFile(filepath.Join(dev, "driver_override"), []byte("(null)\n"), 0o644)
		k.bind(bdf, "nvme")
	}
}

func readOverride(dev string) string {
	b, _ := os.ReadFile(filepath.Join(dev, "driver_override"))
	// Writing "\n" clears the override; the kernel then shows "(null)".
	v := strings.TrimSpace(string(b))
	if v == "(null)" {
		return ""
	}
	return v
}

// Step handles every pending write once, in the order the kernel would have: a writer
// unbinds before it probes, so a probe seen here is applied after the unbinds that
// preceded it (the kernel handles each write synchronously; this stand-in wakes on it).
func (k Kernel) Step() {
	probe := takeRequest(filepath.Join(k.Root, "bus/pci/drivers_probe"))
	for _, drv := range knownDrivers {
		if bdf := takeRequest(filepath.Join(k.Root, "bus/pci/drivers", drv, "unbind")); bdf != "" {
			k.unbind(bdf)
		}
		if bdf := takeRequest(filepath.Join(k.Root, "bus/pci/drivers", drv, "bind")); bdf != "" {
			k.bind(bdf, drv)
		}
	}
	devices, _ := os.ReadDir(filepath.Join(k.Root, "bus/pci/devices"))
	for _, dev := range devices {
		if takeRequest(filepath.Join(k.device(dev.Name()), "remove")) == "1" {
			k.remove(dev.Name())
		}
	}
	if takeRequest(filepath.Join(k.Root, "bus/pci/rescan")) == "1" {
		k.rescan()
	}
	if probe != "" {
		drv := readOverride(k.device(probe))
		if drv == "" {
			drv = "nvme" // the native driver of class 0x010802
		}
		k.bind(probe, drv)
	}
}

// requestFolders hold every attribute a writer may write a request to: the bus's
// drivers_probe and rescan, each driver's bind and unbind, each function's remove.
func (k Kernel) requestFolders() []string {
	folders := []string{filepath.Join(k.Root, "bus/pci")}
	for _, drv := range knownDrivers {
		folders = append(folders, filepath.Join(k.Root, "bus/pci/drivers", drv))
	}
	functions, _ := filepath.Glob(filepath.Join(k.Root, "devices/pci0000:00/*"))
	return append(folders, functions...)
}

// watch watches every request folder there is now. A function's folder loses its watch
// when it moves (remove takes it off the bus, rescan brings it back), so this runs
// before every step; watching a folder already watched changes nothing.
func (k Kernel) watch(watcher *fsnotify.Watcher) error {
	for _, folder := range k.requestFolders() {
		if err := watcher.Add(folder); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("EMULATION: watching %s: %w", folder, err)
		}
	}
	return nil
}

// Run handles each write as it lands, until ctx ends. The kernel acts on a write before
// write(2) returns; inotify wakes this stand-in on every change in the request folders
// instead of it polling the tree, which under TCG took a good share of a node's CPU.
// Its own writes wake it once more, to a step that finds nothing pending.
func (k Kernel) Run(ctx context.Context) error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("EMULATION: watching the sysfs tree: %w", err)
	}
	defer watcher.Close()
	for {
		// Watched first: a write after the watch wakes the next step, one before it is
		// seen by this one.
		if err := k.watch(watcher); err != nil {
			return err
		}
		k.Step()
		select {
		case <-ctx.Done():
			return nil
		case _, open := <-watcher.Events:
			if !open {
				return nil
			}
		case _, open := <-watcher.Errors:
			// An overflowed queue lost events: the next step looks at every request.
			if !open {
				return nil
			}
		}
		drain(watcher)
	}
}

// drain drops the events already queued: one step handles all they announced.
func drain(watcher *fsnotify.Watcher) {
	for {
		select {
		case <-watcher.Events:
		default:
			return
		}
	}
}
