package sysfs

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kubevirt-dra-conformance/driver/emulation/kerneltree"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

// The EMULATED machine against the real kernel's recording, at boot and after each
// step of the bind sequence (to vfio-pci and back, by hand and through the driver's
// pci.Binder), hot removal and rescan: every file, folder, link and device node the
// kernel showed of the NVMe controllers, with its mode and content. What must differ
// is left out of the comparison: the device numbers' majors (the EMULATED nodes get
// numbers no driver of the host answers to; minors follow the order of probes, which
// the kernel does not fix), counters that move by themselves (runtime PM times, I/O
// statistics, the disk sequence number, MSI vector numbers), the two controllers' bus
// addresses (BARs, interrupt line, IRQ, ACPI companion), and where the EMULATED
// attributes, plain files, cannot answer as the kernel's do: a read that fails (EIO from
// an unused autosuspend_delay_ms) and driver_override's own form of what was written.
func TestTheEmulatedMachineShowsWhatTheRecordedKernelShows(t *testing.T) {
	rec := recording(t)
	root := recordedMachineRoot(t, rec)
	kernel := Kernel{Root: root}
	want := rec.Snapshots()
	for i := 0; i <= len(rec.Steps); i++ {
		name := "boot"
		if i > 0 {
			step := rec.Steps[i-1]
			if namesAnotherDevice(step, rec.Functions["nvme"]) {
				continue // the igb NIC's steps (SR-IOV): not emulated yet
			}
			name = step.Name
			replay(t, root, kernel, step)
		}
		if diffs := compare(want[i], capture(t, root, rec), rec.Functions["nvme"]); len(diffs) > 0 {
			t.Errorf("after %s, the EMULATED machine differs from the kernel's (%d):\n%s",
				name, len(diffs), strings.Join(diffs, "\n"))
		}
	}
}

// The comparison finds a file the emulation does not show, naming it.
func TestAFileMissingFromTheEmulatedTreeIsFound(t *testing.T) {
	rec := recording(t)
	root := recordedMachineRoot(t, rec)
	first := rec.Functions["nvme"][0]
	missing := fmt.Sprintf("sys/devices/pci0000:00/%s/nvme/nvme%d/serial", first,
		RecordedIdentity(capture(t, root, rec), first).Instance)
	if err := os.Remove(filepath.Join(root, missing)); err != nil {
		t.Fatal(err)
	}
	diffs := compare(rec.Snapshots()[0], capture(t, root, rec), rec.Functions["nvme"])
	if len(diffs) != 1 || !strings.Contains(diffs[0], fmt.Sprintf("%s/nvme/nvme@%s/serial", first, first)) {
		t.Fatalf("differences %q: want one, naming %s", diffs, missing)
	}
}

func recording(t *testing.T) kerneltree.Recording {
	t.Helper()
	rec, err := kerneltree.Load("reference/kernel-reference.json")
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// namesAnotherDevice: the step writes to or about a function that is no NVMe controller.
func namesAnotherDevice(step kerneltree.Step, nvme []string) bool {
	text := ""
	if step.Write != nil {
		text = step.Write.Path + " " + step.Write.Value
	}
	if step.Call != nil {
		text = step.Call.BDF
	}
	return !onlyThese(text, nvme)
}

// replay does to the EMULATED machine what the step did to the kernel.
func replay(t *testing.T, root string, kernel Kernel, step kerneltree.Step) {
	t.Helper()
	if step.Write != nil {
		path := filepath.Join(root, strings.TrimPrefix(step.Write.Path, "/"))
		if err := os.WriteFile(path, []byte(step.Write.Value), 0); err != nil {
			t.Fatalf("%s: %v", step.Name, err)
		}
		if err := kernel.Step(); err != nil {
			t.Fatalf("%s: %v", step.Name, err)
		}
		return
	}
	// The driver's code waits for the kernel to act: the kernel runs meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- kernel.Run(ctx) }()
	binder := pci.Binder{Sysfs: pci.Sysfs{Root: filepath.Join(root, SysDir)}, Settle: 10 * time.Second}
	var err error
	if step.Call.Restore {
		err = binder.Restore(step.Call.BDF, step.Call.Driver)
	} else {
		_, err = binder.Bind(step.Call.BDF, step.Call.Driver)
	}
	cancel()
	kernelErr := <-stopped
	if kernelErr == nil {
		// The kernel acts on a write before write(2) returns, the stand-in after: a
		// write the call made last may still be pending.
		kernelErr = kernel.Step()
	}
	if kernelErr != nil || err != nil {
		t.Fatalf("%s: driver %v, kernel %v", step.Name, err, kernelErr)
	}
}

func capture(t *testing.T, root string, rec kerneltree.Recording) kerneltree.Snapshot {
	t.Helper()
	snap, err := kerneltree.Capture(root, kerneltree.Patterns(root, rec.Functions["nvme"]))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

var (
	// Counters that move by themselves: compared by kind and mode only.
	volatile = regexp.MustCompile(`/power/runtime_(active_time|suspended_time|usage)$|/(stat|inflight|diskseq|temp1_input)$`)
	// Indexes the kernel gives in order of events: numbers dropped from the path.
	reindexed = regexp.MustCompile(`(hwmon|msi_irqs/)[0-9]+`)
	// The bus addresses a function was given: compared by kind and mode only.
	addressed  = regexp.MustCompile(`/(irq|resource|firmware_node)$`)
	diskSeq    = regexp.MustCompile(`DISKSEQ=[0-9]+\n`)
	bdfs       = regexp.MustCompile(`[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]`)
	iommuGroup = regexp.MustCompile(`^sys/kernel/iommu_groups/([0-9]+)`)
)

// numbering names what the kernel numbered after the function it belongs to: nvme,
// ng, namespace and subsystem instances (numbered in the order of asynchronous probes)
// and device numbers ("kind@function": majors are the node's own, minors follow probes).
func numbering(snap kerneltree.Snapshot, nvme []string) func(string) string {
	type rewrite struct {
		pattern *regexp.Regexp
		with    string
	}
	var rewrites []rewrite
	for _, bdf := range nvme {
		id := RecordedIdentity(snap, bdf)
		for kind, dev := range id.Devices {
			major, minor, _ := strings.Cut(dev, ":")
			rewrites = append(rewrites,
				rewrite{regexp.MustCompile(`MAJOR=` + major + `\nMINOR=` + minor + `\n`), "MAJOR=" + kind + "\nMINOR=@" + bdf + "\n"},
				rewrite{regexp.MustCompile(`(^|[^0-9])` + major + `:` + minor + `([^0-9]|$)`), "${1}" + kind + "@" + bdf + "${2}"})
		}
		if id.Instance >= 0 {
			rewrites = append(rewrites, rewrite{regexp.MustCompile(fmt.Sprintf(`(nvme-subsys|nvme|ng)%d([^0-9]|$)`, id.Instance)), "${1}@" + bdf + "${2}"})
		}
		if id.VFIODev >= 0 {
			rewrites = append(rewrites, rewrite{regexp.MustCompile(fmt.Sprintf(`vfio-dev/vfio%d([^0-9]|$)`, id.VFIODev)), "vfio-dev/vfio@" + bdf + "${1}"})
		}
	}
	return func(s string) string {
		for _, r := range rewrites {
			// Twice: a match ends on the character that may start the next one.
			s = r.pattern.ReplaceAllString(r.pattern.ReplaceAllString(s, r.with), r.with)
		}
		return s
	}
}

// normalize makes a snapshot comparable: only the NVMe controllers' entries (no
// /proc, no other device), the kernel's numbers named after their function, and what
// must differ left out.
func normalize(snap kerneltree.Snapshot, nvme []string) map[string]kerneltree.Entry {
	numbers := numbering(snap, nvme)
	groups := map[string]bool{}
	for p, e := range snap {
		if filepath.Base(p) == "iommu_group" && onlyThese(p, nvme) {
			groups[filepath.Base(e.Target)] = true
		}
	}
	out := map[string]kerneltree.Entry{}
	for p, e := range snap {
		if strings.HasPrefix(p, "proc/") || !onlyThese(p+" "+e.Target, nvme) || strings.Contains(p, "drivers/igb") {
			continue
		}
		if group := iommuGroup.FindStringSubmatch(p); group != nil && !groups[group[1]] {
			continue // another device's group
		}
		// A plain file cannot fail a read as the kernel's attribute does (EIO, ENODATA).
		e.Error = ""
		e.Device, e.Target = numbers(e.Device), numbers(e.Target)
		e.Value = diskSeq.ReplaceAllString(numbers(e.Value), "DISKSEQ=#\n")
		if volatile.MatchString(p) || addressed.MatchString(p) {
			e.Value, e.Target = "", ""
		}
		if filepath.Base(p) == "config" {
			e.Value = withoutAddresses(e.Value)
		}
		if filepath.Base(p) == "driver_override" {
			e.Value = override(e.Value)
		}
		out[numbers(reindexed.ReplaceAllString(p, "${1}#"))] = e
	}
	return out
}

func onlyThese(text string, nvme []string) bool {
	for _, bdf := range bdfs.FindAllString(text, -1) {
		if !contains(nvme, bdf) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// override is what a driver_override says, in one form: the kernel shows "(null)\n"
// for none and adds a newline, the EMULATED file shows what the writer wrote.
func override(value string) string {
	if v := strings.TrimSpace(value); v != "(null)" {
		return v
	}
	return ""
}

// withoutAddresses is a config space with its BARs and interrupt line cleared: the
// addresses firmware gave the function.
func withoutAddresses(value string) string {
	b, err := hex.DecodeString(strings.TrimPrefix(value, "hex:"))
	if err != nil || len(b) < 0x40 {
		return value
	}
	for i := 0x10; i < 0x28; i++ {
		b[i] = 0
	}
	b[0x3c] = 0
	return "hex:" + hex.EncodeToString(b)
}

// compare lists how got differs from want: what is missing, what is there that the
// kernel did not show, and what shows differently, each with its path.
func compare(want, got kerneltree.Snapshot, nvme []string) []string {
	w, g := normalize(want, nvme), normalize(got, nvme)
	var diffs []string
	for p, we := range w {
		ge, ok := g[p]
		switch {
		case !ok:
			diffs = append(diffs, "missing: "+p)
		case ge != we:
			diffs = append(diffs, fmt.Sprintf("differs: %s: got %+v, want %+v", p, ge, we))
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			diffs = append(diffs, "not in the kernel's: "+p)
		}
	}
	sort.Strings(diffs)
	return diffs
}
