package kerneltree

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Recording is what a kernel showed at boot and at each step of a sequence of writes
// (a driver's bind to vfio-pci and back, hot removal and rescan), with where it came from.
type Recording struct {
	Provenance Provenance          `json:"provenance"`
	Functions  map[string][]string `json:"functions"` // the devices recorded, by kind: "nvme", "igb"
	Initial    Snapshot            `json:"initial"`
	Tools      map[string]string   `json:"tools"` // real tools' output at boot, by command line
	Steps      []Step              `json:"steps"`
}

// Provenance names the kernel and the machine the recording came from.
type Provenance struct {
	Kernel     string   `json:"kernel"`     // /proc/version
	QEMU       string   `json:"qemu"`       // qemu-system-x86_64 --version, first line
	QEMUArgs   []string `json:"qemuArgs"`   // how the machine was made
	Debian     string   `json:"debian"`     // the kernel's package version
	RecordedAt string   `json:"recordedAt"` // RFC 3339
	// Seconds from the kernel's start to the first snapshot, and to the last step's.
	BootToTree float64 `json:"bootToTreeSeconds"`
	BootToDone float64 `json:"bootToDoneSeconds"`
	Recipe     string  `json:"recipe"` // the command that makes it again
}

// Step is one write (or a driver call) and what the kernel showed after it.
type Step struct {
	Name   string            `json:"name"`
	Did    string            `json:"did"`
	Write  *Write            `json:"write,omitempty"`
	Call   *Call             `json:"call,omitempty"`
	Error  string            `json:"error,omitempty"` // what the write answered, when it failed
	Change Change            `json:"change"`
	Tools  map[string]string `json:"tools,omitempty"` // outputs that changed with this step
}

// Write is a value written to a file, as a shell's echo would.
type Write struct {
	Path  string `json:"path"` // absolute, as on the recorded machine
	Value string `json:"value"`
}

// Call is the reference driver's own pci.Binder moving a function: Bind to Driver, or
// Restore to it (and clear the override).
type Call struct {
	BDF     string `json:"bdf"`
	Driver  string `json:"driver"`
	Restore bool   `json:"restore,omitempty"`
}

// Snapshots replays the recording: the snapshot after each step, the initial first.
func (r Recording) Snapshots() []Snapshot {
	out := []Snapshot{r.Initial}
	for _, step := range r.Steps {
		out = append(out, out[len(out)-1].Apply(step.Change))
	}
	return out
}

// Load reads a recording.
func Load(path string) (Recording, error) {
	var r Recording
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// deviceNumberLinks are /sys/dev's links for the NVMe and VFIO device nodes under
// root/dev (what lsblk and udev find a node's device by).
func deviceNumberLinks(root string) []string {
	var out []string
	for _, pattern := range []string{"dev/nvme*", "dev/ng*", "dev/vfio/*"} {
		nodes, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, node := range nodes {
			var st unix.Stat_t
			if unix.Lstat(node, &st) != nil {
				continue
			}
			kind := "char"
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFBLK:
				kind = "block"
			case unix.S_IFCHR:
			default:
				continue
			}
			out = append(out, fmt.Sprintf("sys/dev/%s/%d:%d", kind, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		}
	}
	return out
}

// Patterns are what a snapshot of these functions holds: each function (its link on
// the bus, its device folder, its IOMMU group), the drivers involved, the nvme, block
// and vfio classes, the device nodes, and /proc/devices (which numbers went to which
// driver). root is where the machine's / is; functions are PCI addresses.
func Patterns(root string, functions []string) []string {
	patterns := []string{
		"sys/bus/pci/drivers/nvme", "sys/bus/pci/drivers/vfio-pci", "sys/bus/pci/drivers/igb",
		"sys/bus/pci/drivers/igbvf", "sys/bus/pci/drivers_probe", "sys/bus/pci/drivers_autoprobe",
		"sys/bus/pci/rescan", "sys/class/nvme", "sys/class/nvme-subsystem", "sys/class/nvme-generic",
		"sys/block/nvme*", "sys/class/block/nvme*", "sys/devices/virtual/nvme-subsystem",
		"sys/devices/virtual/vfio", "sys/class/vfio", "sys/class/vfio-dev",
		"dev/nvme*", "dev/ng*", "dev/vfio", "dev/disk/by-id/nvme-*", "proc/devices",
	}
	patterns = append(patterns, deviceNumberLinks(root)...)
	for _, bdf := range functions {
		link := filepath.Join("sys/bus/pci/devices", bdf)
		patterns = append(patterns, link)
		real, err := filepath.EvalSymlinks(filepath.Join(root, link))
		if err != nil {
			continue
		}
		rel, _ := filepath.Rel(root, real)
		patterns = append(patterns, rel)
		if group, err := filepath.EvalSymlinks(filepath.Join(real, "iommu_group")); err == nil {
			rel, _ := filepath.Rel(root, group)
			patterns = append(patterns, rel)
		}
	}
	return patterns
}
