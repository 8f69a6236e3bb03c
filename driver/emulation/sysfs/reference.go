package sysfs

import (
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/kubevirt-dra-conformance/driver/emulation/kerneltree"
)

// The recording of a real kernel (scripts/kernel_reference.py): what Debian's kernel
// showed of QEMU's NVMe controllers in a TCG VM, at boot and after each step of the
// driver's bind sequence. The EMULATED kernel shows each function as the recording
// shows its first controller, in the same driver state, with the function's identity.
//
//go:embed reference/kernel-reference.json
var recordingJSON []byte

// Driver states of a function, as the recording has them.
const (
	boundNVMe = "nvme"
	boundVFIO = "vfio-pci"
	unbound   = ""
)

// stateSteps name the recorded step after which the first controller was in each state
// ("" is the boot snapshot).
var stateSteps = map[string]string{boundNVMe: "", unbound: "unbind-nvme", boundVFIO: "probe-vfio-pci"}

// Template is the recording made reusable: the first controller's entries in each
// driver state with its identity replaced by placeholders, and the entries no function
// owns (driver folders, class folders), some of them only while a function is in a state.
type Template struct {
	function map[string]kerneltree.Snapshot
	shared   kerneltree.Snapshot
	sharedIn map[string]kerneltree.Snapshot
	// Recording is the recording the template came from.
	Recording kerneltree.Recording
}

// Identity is what makes one function's entries its own: its address, IOMMU group,
// serial and size, its NUMA placement, and the numbers the kernel gave it.
type Identity struct {
	BDF      string
	Group    int
	Serial   string
	Sectors  int64
	NUMANode int
	CPUList  string // local_cpulist: the CPUs of its NUMA node (all CPUs without NUMA)
	CPUMask  string // local_cpus: the same as a hex mask
	Instance int    // nvme<N>, ng<N>n1, nvme<N>n1, nvme-subsys<N>
	Hwmon    int
	VFIODev  int // vfio-dev/vfio<N>
	DiskSeq  int
	// Devices are the "major:minor" of its device nodes, by kind: nvme (the
	// controller), generic (ng<N>n1), block (nvme<N>n1), vfio (its group).
	Devices map[string]string
}

// LoadTemplate is the template of the embedded recording, read once.
var LoadTemplate = sync.OnceValues(func() (*Template, error) {
	var rec kerneltree.Recording
	if err := json.Unmarshal(recordingJSON, &rec); err != nil {
		return nil, fmt.Errorf("EMULATION: the embedded kernel recording: %w", err)
	}
	return NewTemplate(rec)
})

// NewTemplate makes a template of the first NVMe function of rec.
func NewTemplate(rec kerneltree.Recording) (*Template, error) {
	nvme := rec.Functions["nvme"]
	if len(nvme) == 0 {
		return nil, fmt.Errorf("EMULATION: the kernel recording has no NVMe function")
	}
	snapshots := rec.Snapshots()
	byStep := map[string]kerneltree.Snapshot{"": snapshots[0]}
	for i, step := range rec.Steps {
		byStep[step.Name] = snapshots[i+1]
	}
	t := &Template{Recording: rec, function: map[string]kerneltree.Snapshot{},
		shared: kerneltree.Snapshot{}, sharedIn: map[string]kerneltree.Snapshot{}}
	first := nvme[0]
	boot := RecordedIdentity(snapshots[0], first)
	for state, step := range stateSteps {
		snap, ok := byStep[step]
		if !ok {
			return nil, fmt.Errorf("EMULATION: the kernel recording has no step %q", step)
		}
		// Names from boot (a state without a controller has none), numbers from the state.
		id := boot
		id.VFIODev = RecordedIdentity(snap, first).VFIODev
		id.Devices = recordedDevices(snap, id)
		owned, shared := t.split(snap, id, nvme)
		t.function[state] = owned
		for p, e := range shared {
			if _, always := snapshots[0][p]; always || state == boundNVMe {
				t.shared[p] = e
				continue
			}
			if t.sharedIn[state] == nil {
				t.sharedIn[state] = kerneltree.Snapshot{}
			}
			t.sharedIn[state][p] = e
		}
	}
	return t, nil
}

// split sorts a snapshot's entries into the function's own (with placeholders) and
// those no function owns; other functions' entries and /proc are dropped.
func (t *Template) split(snap kerneltree.Snapshot, id Identity, nvme []string) (kerneltree.Snapshot, kerneltree.Snapshot) {
	owned, shared := kerneltree.Snapshot{}, kerneltree.Snapshot{}
	mine := tokens(id)
	var others []replacements
	for _, bdf := range nvme {
		if bdf != id.BDF {
			others = append(others, tokens(RecordedIdentity(snap, bdf)))
		}
	}
	for p, e := range snap {
		if strings.HasPrefix(p, "proc/") || foreign(p+" "+e.Target, id.BDF, others) {
			continue
		}
		tp, tt := mine.apply(p), mine.apply(e.Target)
		if tp == p && tt == e.Target {
			shared[p] = e
			continue
		}
		e.Target, e.Device = tt, mine.apply(e.Device)
		e.Value = valueTokens(path.Base(p), mine.apply(e.Value), id)
		owned[tp] = e
	}
	return owned, shared
}

var bdfPattern = regexp.MustCompile(`[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]`)

// foreign tells whether an entry (its path and link target) belongs to another function
// than first: it names another function's address, another driver's folder, or another
// NVMe controller's names.
func foreign(text, first string, others []replacements) bool {
	for _, bdf := range bdfPattern.FindAllString(text, -1) {
		if bdf != first {
			return true
		}
	}
	if strings.Contains(text, "drivers/igb") {
		return true
	}
	for _, other := range others {
		if other.apply(text) != text {
			return true
		}
	}
	return false
}

// RecordedIdentity reads a function's identity, names and numbers from a snapshot of
// the kernel.
func RecordedIdentity(snap kerneltree.Snapshot, bdf string) Identity {
	id := Identity{BDF: bdf, Group: -1, Instance: -1, Hwmon: -1, VFIODev: -1, NUMANode: -1}
	dir := functionDir(snap, bdf)
	if group, ok := snap[dir+"/iommu_group"]; ok {
		id.Group, _ = strconv.Atoi(path.Base(group.Target))
	}
	id.NUMANode, _ = strconv.Atoi(strings.TrimSpace(snap[dir+"/numa_node"].Value))
	id.CPUList = strings.TrimSpace(snap[dir+"/local_cpulist"].Value)
	id.CPUMask = strings.TrimSpace(snap[dir+"/local_cpus"].Value)
	for p := range snap {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			continue
		}
		var n int
		switch {
		case scanned(rest, "nvme/nvme%d", &n):
			id.Instance = n
		case scanned(rest, "vfio-dev/vfio%d", &n):
			id.VFIODev = n
		}
	}
	ctrl := fmt.Sprintf("%s/nvme/nvme%d", dir, id.Instance)
	for p := range snap {
		var n int
		if rest, ok := strings.CutPrefix(p, ctrl+"/"); ok && scanned(rest, "hwmon%d", &n) {
			id.Hwmon = n
		}
	}
	id.Serial = strings.TrimSpace(snap[ctrl+"/serial"].Value)
	ns := fmt.Sprintf("%s/nvme%dn1", ctrl, id.Instance)
	id.Sectors, _ = strconv.ParseInt(strings.TrimSpace(snap[ns+"/size"].Value), 10, 64)
	id.DiskSeq, _ = strconv.Atoi(strings.TrimSpace(snap[ns+"/diskseq"].Value))
	id.Devices = recordedDevices(snap, id)
	return id
}

// scanned is Sscanf that must consume the whole of s.
func scanned(s, format string, n *int) bool {
	var rest string
	count, _ := fmt.Sscanf(s+" ", format+"%s", n, &rest)
	return count == 1
}

func functionDir(snap kerneltree.Snapshot, bdf string) string {
	link := snap["sys/bus/pci/devices/"+bdf]
	return path.Join("sys/bus/pci/devices", link.Target)
}

// recordedDevices are the function's device nodes' numbers, from its /dev entries.
func recordedDevices(snap kerneltree.Snapshot, id Identity) map[string]string {
	nodes := map[string]string{
		"nvme":    fmt.Sprintf("dev/nvme%d", id.Instance),
		"generic": fmt.Sprintf("dev/ng%dn1", id.Instance),
		"block":   fmt.Sprintf("dev/nvme%dn1", id.Instance),
		"vfio":    fmt.Sprintf("dev/vfio/%d", id.Group),
	}
	out := map[string]string{}
	for kind, node := range nodes {
		if e, ok := snap[node]; ok && e.Device != "" {
			out[kind] = e.Device
		}
	}
	return out
}

// replacement is one rewrite of an identity's token into its placeholder.
type replacement struct {
	pattern *regexp.Regexp
	with    string
}

type replacements []replacement

func (r replacements) apply(s string) string {
	for _, rep := range r {
		s = rep.pattern.ReplaceAllString(s, rep.with)
	}
	return s
}

func literal(s string) *regexp.Regexp { return regexp.MustCompile(regexp.QuoteMeta(s)) }

// tokens are the rewrites that turn a function's identity into placeholders, longest
// and most specific first.
func tokens(id Identity) replacements {
	var r replacements
	if id.Serial != "" {
		r = append(r,
			replacement{literal(fmt.Sprintf("%-20s", id.Serial)), "{{serial20}}"},
			replacement{literal(hex.EncodeToString([]byte(id.Serial))), "{{serialhex}}"},
			replacement{literal(id.Serial), "{{serial}}"})
	}
	r = append(r, replacement{literal(id.BDF), "{{bdf}}"})
	for kind, dev := range id.Devices {
		major, minor, _ := strings.Cut(dev, ":")
		r = append(r,
			replacement{regexp.MustCompile(fmt.Sprintf(`MAJOR=%s\nMINOR=%s\n`, major, minor)),
				fmt.Sprintf("MAJOR={{major:%s}}\nMINOR={{minor:%s}}\n", kind, kind)},
			replacement{regexp.MustCompile(fmt.Sprintf(`(^|[^0-9])%s:%s([^0-9]|$)`, major, minor)),
				fmt.Sprintf("${1}{{dev:%s}}${2}", kind)})
	}
	if id.Instance >= 0 {
		r = append(r, replacement{regexp.MustCompile(fmt.Sprintf(`(nvme-subsys|nvme|ng)%d([^0-9]|$)`, id.Instance)),
			"${1}{{n}}${2}"})
		// A second pass: a match ends on the character that may start the next one.
		r = append(r, r[len(r)-1])
	}
	if id.Hwmon >= 0 {
		r = append(r, replacement{regexp.MustCompile(fmt.Sprintf(`hwmon%d([^0-9]|$)`, id.Hwmon)), "hwmon{{hwmon}}${1}"})
	}
	if id.VFIODev >= 0 {
		r = append(r, replacement{regexp.MustCompile(fmt.Sprintf(`vfio-dev/vfio%d([^0-9]|$)`, id.VFIODev)), "vfio-dev/vfio{{vfiodev}}${1}"})
	}
	if id.Group >= 0 {
		r = append(r, replacement{regexp.MustCompile(fmt.Sprintf(`(iommu_groups|vfio)/%d([^0-9]|$)`, id.Group)),
			"${1}/{{group}}${2}"})
	}
	return r
}

// valueTokens rewrites what a file holds of the function beyond its names: its size,
// NUMA placement and disk sequence number.
func valueTokens(name, value string, id Identity) string {
	switch name {
	case "size", "nuse":
		if strings.TrimSpace(value) == strconv.FormatInt(id.Sectors, 10) {
			return "{{sectors}}\n"
		}
	case "numa_node":
		return "{{numa}}\n"
	case "local_cpulist":
		return "{{cpulist}}\n"
	case "local_cpus":
		return "{{cpumask}}\n"
	case "diskseq":
		return "{{diskseq}}\n"
	case "uevent":
		return strings.Replace(value, fmt.Sprintf("DISKSEQ=%d\n", id.DiskSeq), "DISKSEQ={{diskseq}}\n", 1)
	}
	return value
}

// Render is a function's entries in a driver state, with its identity.
func (t *Template) Render(state string, id Identity) kerneltree.Snapshot {
	fill := strings.NewReplacer(id.values()...)
	out := kerneltree.Snapshot{}
	for p, e := range t.function[state] {
		e.Target, e.Value, e.Device = fill.Replace(e.Target), fill.Replace(e.Value), fill.Replace(e.Device)
		out[fill.Replace(p)] = e
	}
	return out
}

// Shared are the entries no function owns, with those of the states some function is in.
func (t *Template) Shared(states map[string]bool) kerneltree.Snapshot {
	out := kerneltree.Snapshot{}
	for p, e := range t.shared {
		out[p] = e
	}
	for state, in := range states {
		if in {
			for p, e := range t.sharedIn[state] {
				out[p] = e
			}
		}
	}
	return out
}

func (id Identity) values() []string {
	pairs := []string{
		"{{serial20}}", fmt.Sprintf("%-20s", id.Serial), "{{serialhex}}", hex.EncodeToString([]byte(id.Serial)),
		"{{serial}}", id.Serial, "{{bdf}}", id.BDF, "{{n}}", strconv.Itoa(id.Instance),
		"{{hwmon}}", strconv.Itoa(id.Hwmon), "{{vfiodev}}", strconv.Itoa(id.VFIODev),
		"{{group}}", strconv.Itoa(id.Group), "{{sectors}}", strconv.FormatInt(id.Sectors, 10),
		"{{numa}}", strconv.Itoa(id.NUMANode), "{{cpulist}}", id.CPUList, "{{cpumask}}", id.CPUMask,
		"{{diskseq}}", strconv.Itoa(id.DiskSeq),
	}
	for kind, dev := range id.Devices {
		major, minor, _ := strings.Cut(dev, ":")
		pairs = append(pairs, "{{dev:"+kind+"}}", dev, "{{major:"+kind+"}}", major, "{{minor:"+kind+"}}", minor)
	}
	return pairs
}

// RecordedMachine is the recorded machine's NVMe controllers (addresses, groups,
// serials, sizes, NUMA nodes) and CPUs: what Build needs for an EMULATED one like it.
func RecordedMachine(rec kerneltree.Recording) ([]Controller, []int, error) {
	boot := rec.Snapshots()[0]
	var controllers []Controller
	for _, bdf := range rec.Functions["nvme"] {
		id := RecordedIdentity(boot, bdf)
		var domain, bus, slot, function int
		if _, err := fmt.Sscanf(bdf, "%04x:%02x:%02x.%d", &domain, &bus, &slot, &function); err != nil || bus != 0 {
			return nil, nil, fmt.Errorf("EMULATION: %s is not a function on bus 0 (%v)", bdf, err)
		}
		controllers = append(controllers, Controller{Slot: slot, Serial: id.Serial,
			SizeBytes: id.Sectors * 512, IOMMUGroup: id.Group, NUMANode: id.NUMANode})
	}
	if len(controllers) == 0 {
		return nil, nil, fmt.Errorf("EMULATION: the recording has no NVMe controller")
	}
	cpus, err := OnlineCPUs(RecordedIdentity(boot, rec.Functions["nvme"][0]).CPUList)
	return controllers, cpus, err
}
