// Command kernel-reference records what a real Linux kernel shows of QEMU's NVMe
// controllers (and an igb NIC's SR-IOV functions) at boot and at each step of the bind
// sequence the reference driver performs, step by step and then through the driver's
// own pci.Binder: the reference the EMULATED kernel (emulation/sysfs) is held against.
// It runs inside the TCG VM of scripts/kernel_reference.py, as root, on the real /sys.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kubevirt-dra-conformance/driver/emulation/kerneltree"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

// igbClass is an Ethernet controller's PCI class; QEMU's igb is an Intel 82576 (8086:10c9).
const (
	igbClass  = "0x020000"
	igbDevice = "10c9"
	toolLimit = 60 * time.Second
)

type recorder struct {
	root      string // "/" in the VM
	toolsSeen map[string]string
}

func main() {
	out := flag.String("out", "", "where the recording goes (JSON)")
	provenance := flag.String("provenance", "", "JSON of the machine's provenance, written by the host")
	flag.Parse()
	if *out == "" || *provenance == "" {
		fmt.Fprintln(os.Stderr, "usage: kernel-reference --out FILE --provenance FILE")
		os.Exit(2)
	}
	if err := run(*out, *provenance); err != nil {
		fmt.Fprintln(os.Stderr, "kernel-reference:", err)
		os.Exit(1)
	}
}

func run(out, provenanceFile string) error {
	var rec kerneltree.Recording
	b, err := os.ReadFile(provenanceFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &rec.Provenance); err != nil {
		return fmt.Errorf("%s: %w", provenanceFile, err)
	}
	version, _ := os.ReadFile("/proc/version")
	rec.Provenance.Kernel = strings.TrimSpace(string(version))
	rec.Provenance.RecordedAt = time.Now().UTC().Format(time.RFC3339)
	sys := pci.Sysfs{Root: "/sys"}
	nvme, err := sys.ScanClass(pci.NVMeClass)
	if err != nil || len(nvme) == 0 {
		return fmt.Errorf("no NVMe controller on the bus (%v)", err)
	}
	r := &recorder{root: "/", toolsSeen: map[string]string{}}
	rec.Functions = r.functions()
	rec.Initial, rec.Tools = r.capture()
	rec.Provenance.BootToTree = uptime()
	bdf := nvme[0].BDF
	dev := sys.DevicePath(bdf)
	write := func(name, path, value string) kerneltree.Step {
		step := kerneltree.Step{Name: name, Did: fmt.Sprintf("wrote %q to %s", value, path),
			Write: &kerneltree.Write{Path: path, Value: value}}
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			step.Error = err.Error()
		}
		return step
	}
	steps := []func() kerneltree.Step{
		func() kerneltree.Step {
			return write("override-vfio-pci", filepath.Join(dev, "driver_override"), "vfio-pci")
		},
		func() kerneltree.Step { return write("unbind-nvme", "/sys/bus/pci/drivers/nvme/unbind", bdf) },
		func() kerneltree.Step { return write("probe-vfio-pci", "/sys/bus/pci/drivers_probe", bdf) },
		func() kerneltree.Step { return write("unbind-vfio-pci", "/sys/bus/pci/drivers/vfio-pci/unbind", bdf) },
		func() kerneltree.Step { return write("override-cleared", filepath.Join(dev, "driver_override"), "\n") },
		func() kerneltree.Step { return write("probe-nvme", "/sys/bus/pci/drivers_probe", bdf) },
		// The reference driver's own code, as it runs at prepare and unprepare.
		func() kerneltree.Step { return driverCall("driver-bind-vfio-pci", bdf, pci.VFIODriver) },
		func() kerneltree.Step { return driverCall("driver-restore-nvme", bdf, "nvme") },
		func() kerneltree.Step { return write("remove", filepath.Join(dev, "remove"), "1") },
		func() kerneltree.Step { return write("rescan", "/sys/bus/pci/rescan", "1") },
	}
	if pfs := rec.Functions["igb"]; len(pfs) > 0 {
		numvfs := filepath.Join(sys.DevicePath(pfs[0]), "sriov_numvfs")
		steps = append(steps,
			func() kerneltree.Step { return write("igb-sriov-2-vfs", numvfs, "2") },
			func() kerneltree.Step { return write("igb-sriov-0-vfs", numvfs, "0") })
	}
	current := rec.Initial
	for _, act := range steps {
		step := act()
		settle()
		after, tools := r.capture()
		step.Change = kerneltree.Diff(current, after)
		current = after
		step.Tools = tools
		rec.Steps = append(rec.Steps, step)
		fmt.Fprintf(os.Stderr, "kernel-reference: %s: %d added, %d removed, %d changed %s\n", step.Name,
			len(step.Change.Added), len(step.Change.Removed), len(step.Change.Changed), step.Error)
	}
	rec.Provenance.BootToDone = uptime()
	encoded, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(encoded, '\n'), 0o644)
}

func driverCall(name, bdf, driver string) kerneltree.Step {
	binder := pci.Binder{Sysfs: pci.Sysfs{Root: "/sys"}, Settle: 10 * time.Second}
	restore := driver == "nvme"
	step := kerneltree.Step{Name: name, Call: &kerneltree.Call{BDF: bdf, Driver: driver, Restore: restore}}
	var err error
	if restore {
		step.Did = fmt.Sprintf("pci.Binder.Restore(%s, nvme)", bdf)
		err = binder.Restore(bdf, driver)
	} else {
		step.Did = fmt.Sprintf("pci.Binder.Bind(%s, %s)", bdf, driver)
		_, err = binder.Bind(bdf, driver)
	}
	if err != nil {
		step.Error = err.Error()
	}
	return step
}

// uptime is how long the kernel has been running, in seconds (/proc/uptime).
func uptime() float64 {
	b, _ := os.ReadFile("/proc/uptime")
	var seconds float64
	_, _ = fmt.Sscan(string(b), &seconds)
	return seconds
}

// settle waits for udev to finish what the kernel's events started (links in /dev).
func settle() {
	_, _ = tool("udevadm", "settle", "--timeout=30")
}

// functions are the PCI functions recorded, by kind: every NVMe controller, every igb
// function (its VFs once they exist).
func (r *recorder) functions() map[string][]string {
	sys := pci.Sysfs{Root: "/sys"}
	out := map[string][]string{}
	nvme, _ := sys.ScanClass(pci.NVMeClass)
	for _, fn := range nvme {
		out["nvme"] = append(out["nvme"], fn.BDF)
	}
	nics, _ := sys.ScanClass(igbClass)
	for _, fn := range nics {
		if fn.DeviceID == igbDevice {
			out["igb"] = append(out["igb"], fn.BDF)
		}
	}
	for _, pf := range out["igb"] {
		vfs, _ := filepath.Glob(filepath.Join(sys.DevicePath(pf), "virtfn*"))
		for _, vf := range vfs {
			if target, err := filepath.EvalSymlinks(vf); err == nil {
				out["igb-vf"] = append(out["igb-vf"], filepath.Base(target))
			}
		}
	}
	return out
}

// patterns are what a snapshot holds: every function recorded, and what goes with it.
func (r *recorder) patterns() []string {
	var bdfs []string
	for _, functions := range r.functions() {
		bdfs = append(bdfs, functions...)
	}
	return kerneltree.Patterns(r.root, bdfs)
}

// capture takes a snapshot and the real tools' outputs that changed since the last one.
func (r *recorder) capture() (kerneltree.Snapshot, map[string]string) {
	snap, err := kerneltree.Capture(r.root, r.patterns())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernel-reference: capture:", err)
	}
	// lsblk's view of the NVMe namespaces alone (block major 259, blkext).
	commands := [][]string{{"lsblk", "--json", "--output-all", "--include", "259"}, {"lspci", "-nn"}}
	functions := r.functions()
	kinds := make([]string, 0, len(functions))
	for kind := range functions {
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		for _, bdf := range functions[kind] {
			commands = append(commands, []string{"lspci", "-vvv", "-nn", "-k", "-s", bdf},
				[]string{"virsh", "-c", "nodedev:///system", "nodedev-dumpxml",
					"pci_" + strings.NewReplacer(":", "_", ".", "_").Replace(bdf)})
		}
	}
	changed := map[string]string{}
	for _, argv := range commands {
		text, err := tool(argv[0], argv[1:]...)
		if err != nil {
			text += "\n(error: " + err.Error() + ")"
		}
		key := strings.Join(argv, " ")
		if r.toolsSeen[key] != text {
			changed[key] = text
			r.toolsSeen[key] = text
		}
	}
	return snap, changed
}

func tool(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}
