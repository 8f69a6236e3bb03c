package kerneltree

import (
	"encoding/json"
	"fmt"
	"os"
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
	Error  string            `json:"error,omitempty"` // what the write answered, when it failed
	Change Change            `json:"change"`
	Tools  map[string]string `json:"tools,omitempty"` // outputs that changed with this step
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
