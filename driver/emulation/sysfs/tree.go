// Package sysfs is an EMULATION of the Linux kernel's view of PCI NVMe controllers, for
// hosts without a PCI bus (the hermetic cluster) and for unit tests: the sysfs entries
// (the function, its IOMMU group, the nvme, nvme-generic, nvme-subsystem, block, vfio
// and vfio-dev classes) and /dev nodes a real kernel shows, in each driver state, as the
// recording of a real kernel (reference/kernel-reference.json) shows them, with each
// controller's own identity. It mirrors kubevirtci's `--nvme` layout: QEMU NVMe
// controllers 1b36:0010, serial nvme-<i>, one IOMMU group each. Nothing here is used by
// the driver itself; it only builds the tree the driver is pointed at and plays the
// kernel's part when the tree is written to.
package sysfs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/kubevirt-dra-conformance/driver/emulation/kerneltree"
)

// Controller describes one emulated NVMe controller: the hardware in its slot.
type Controller struct {
	Slot       int    // PCI slot on bus 0: BDF 0000:00:<slot>.0
	Serial     string // nvme-<i>
	SizeBytes  int64
	IOMMUGroup int
	NUMANode   int // -1: the machine has no NUMA (as QEMU's machines by default)
}

// BDF is the controller's PCI address.
func (c Controller) BDF() string { return fmt.Sprintf("0000:00:%02x.0", c.Slot) }

// KubevirtciControllers mirrors `--nvme SIZE` repeated: serials nvme-0.., slots from 5.
func KubevirtciControllers(sizes []int64) []Controller {
	out := make([]Controller, 0, len(sizes))
	for i, size := range sizes {
		out = append(out, Controller{
			Slot: 5 + i, Serial: fmt.Sprintf("nvme-%d", i),
			SizeBytes: size, IOMMUGroup: 10 + i, NUMANode: -1,
		})
	}
	return out
}

// function is a controller and what the kernel made of it.
type function struct {
	Controller
	Present  bool     // on the bus (not removed)
	Driver   string   // nvme, vfio-pci, or "" (no driver)
	Override string   // driver_override, "" when cleared
	Numbers  Identity // its names and numbers while bound
}

// machine is the EMULATED kernel's state, kept beside the trees it shows.
type machine struct {
	Majors      Majors
	CPUs        []int // the CPUs online on the host
	NUMANodes   int   // how many NUMA nodes the CPUs are split into (0: no NUMA)
	Functions   []*function
	NextDiskSeq int
}

// The trees of a machine root: its sysfs (what /sys shows), its /dev, and its state.
const (
	SysDir    = "sys"
	DevDir    = "dev"
	stateFile = "emulated-kernel.json"
)

// Build creates the machine under root (root/sys, root/dev) with every controller
// bound to the nvme driver, as a node boots. procDevices is the host's /proc/devices
// (the device numbers given out must be free there) and cpus the host's online CPUs.
func Build(root string, controllers []Controller, procDevices string, cpus []int) error {
	majors, err := FreeMajors(procDevices)
	if err != nil {
		return err
	}
	m := &machine{Majors: majors, CPUs: cpus, NextDiskSeq: 1}
	for _, c := range controllers {
		m.NUMANodes = max(m.NUMANodes, c.NUMANode+1)
	}
	for _, c := range controllers {
		fn := &function{Controller: c, Present: true}
		m.bind(fn, unbound) // holds no numbers yet
		m.Functions = append(m.Functions, fn)
	}
	for _, fn := range m.Functions {
		m.bind(fn, boundNVMe) // probed in slot order
	}
	t, err := LoadTemplate()
	if err != nil {
		return err
	}
	if err := apply(root, kerneltree.Diff(nil, m.render(t))); err != nil {
		return err
	}
	return m.save(root)
}

// Built tells whether a machine was built under root.
func Built(root string) bool {
	_, err := os.Stat(filepath.Join(root, stateFile))
	return err == nil
}

// OnlineCPUs parses a CPU list as /sys/devices/system/cpu/online shows it ("0-3,8").
func OnlineCPUs(list string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		first, last, ranged := strings.Cut(part, "-")
		lo, err := strconv.Atoi(first)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", list, err)
		}
		hi := lo
		if ranged {
			if hi, err = strconv.Atoi(last); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", list, err)
			}
		}
		for cpu := lo; cpu <= hi; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}

// nodeCPUs are the CPUs local to a NUMA node: all of them without NUMA, else an even
// share, in order, as a machine with that many nodes of equal size has them.
func (m *machine) nodeCPUs(node int) []int {
	if node < 0 || m.NUMANodes == 0 {
		return m.CPUs
	}
	per := max(1, len(m.CPUs)/m.NUMANodes)
	lo := min(node*per, len(m.CPUs)-1)
	return m.CPUs[lo:min(lo+per, len(m.CPUs))]
}

// cpuList prints CPUs as the kernel's %*pbl does ("0-1,4").
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// cpuMask prints CPUs as the kernel's %*pb does for a machine of width CPUs: hex,
// comma-separated groups of 32 bits, the first group as wide as it needs.
func cpuMask(cpus []int, width int) string {
	digits := make([]byte, (width+3)/4)
	for i := range digits {
		digits[i] = '0'
	}
	for _, cpu := range cpus {
		pos := len(digits) - 1 - cpu/4
		v, _ := strconv.ParseUint(string(digits[pos]), 16, 8)
		digits[pos] = strconv.FormatUint(v|1<<(cpu%4), 16)[0]
	}
	var groups []string
	for end := len(digits); end > 0; end -= 8 {
		groups = append([]string{string(digits[max(0, end-8):end])}, groups...)
	}
	return strings.Join(groups, ",")
}

// lowestFree is the lowest number no other function holds, as the kernel's ida gives.
func (m *machine) lowestFree(self *function, held func(*function) int) int {
	taken := map[int]bool{}
	for _, fn := range m.Functions {
		if fn != self {
			taken[held(fn)] = true
		}
	}
	n := 0
	for taken[n] {
		n++
	}
	return n
}

// bind gives fn to a driver and the names and numbers the driver's probe gives it.
func (m *machine) bind(fn *function, driver string) {
	fn.Driver = driver
	cpus := m.nodeCPUs(fn.NUMANode)
	id := Identity{BDF: fn.BDF(), Group: fn.IOMMUGroup, Serial: fn.Serial, Sectors: fn.SizeBytes / 512,
		NUMANode: fn.NUMANode, CPUList: cpuList(cpus), CPUMask: cpuMask(cpus, len(m.CPUs)),
		Instance: -1, Hwmon: -1, VFIODev: -1, Devices: map[string]string{}}
	switch driver {
	case boundNVMe:
		id.Instance = m.lowestFree(fn, func(f *function) int { return f.Numbers.Instance })
		id.Hwmon = m.lowestFree(fn, func(f *function) int { return f.Numbers.Hwmon })
		id.DiskSeq = m.NextDiskSeq
		m.NextDiskSeq++
		for _, kind := range []string{"nvme", "generic", "block"} {
			id.Devices[kind] = fmt.Sprintf("%d:%d", m.Majors[kind], id.Instance)
		}
	case boundVFIO:
		id.VFIODev = m.lowestFree(fn, func(f *function) int { return f.Numbers.VFIODev })
		minor := m.lowestFree(fn, func(f *function) int { return vfioMinor(f) })
		id.Devices["vfio"] = fmt.Sprintf("%d:%d", m.Majors["vfio"], minor)
	}
	fn.Numbers = id
}

// vfioMinor is the minor of a function's VFIO group node, -1 without one.
func vfioMinor(fn *function) int {
	_, minor, found := strings.Cut(fn.Numbers.Devices["vfio"], ":")
	if !found {
		return -1
	}
	n, _ := strconv.Atoi(minor)
	return n
}

// render is everything the machine shows: each function on the bus in its driver
// state, with its driver_override, and the entries no function owns.
func (m *machine) render(t *Template) kerneltree.Snapshot {
	out := kerneltree.Snapshot{}
	states := map[string]bool{}
	for _, fn := range m.Functions {
		if !fn.Present {
			continue
		}
		states[fn.Driver] = true
		for p, e := range t.Render(fn.Driver, fn.Numbers) {
			out[p] = e
		}
		override := filepath.Join("sys/devices/pci0000:00", fn.BDF(), "driver_override")
		e := out[override]
		e.Value = "(null)\n"
		if fn.Override != "" {
			e.Value = fn.Override + "\n"
		}
		out[override] = e
	}
	for p, e := range t.Shared(states) {
		out[p] = e
	}
	return out
}

func (m *machine) save(root string) error {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, stateFile), b, 0o644)
}

func loadMachine(root string) (*machine, error) {
	b, err := os.ReadFile(filepath.Join(root, stateFile))
	if err != nil {
		return nil, fmt.Errorf("EMULATION: the machine's state: %w", err)
	}
	var m machine
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("EMULATION: the machine's state: %w", err)
	}
	return &m, nil
}

// byDepth sorts paths parents first.
func byDepth(paths []string, deepestFirst bool) {
	sort.SliceStable(paths, func(i, j int) bool {
		di, dj := strings.Count(paths[i], "/"), strings.Count(paths[j], "/")
		if di != dj {
			return (di < dj) != deepestFirst
		}
		return paths[i] < paths[j]
	})
}

// DeviceStateRoot is where a node keeps each function's state (WriteDeviceState's root
// there), and where a container holding the function's VFIO group sees it.
const DeviceStateRoot = "/var/lib/kdc-emulated-pci"

// WriteDeviceState creates what real hardware keeps in the device itself, under
// root/<bdf>: its identity (serial, model) and its media, which persists as a device's
// flash does. The EMULATED VFIO hop gives it to QEMU. Existing media is kept. The media
// is writable by any user: the launcher's QEMU runs as its pod's user.
func WriteDeviceState(root string, c Controller) error {
	dir := filepath.Join(root, c.BDF())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "serial"), []byte(c.Serial+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "model"), []byte(QEMUModel+"\n"), 0o644); err != nil {
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
