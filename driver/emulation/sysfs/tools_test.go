package sysfs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/kubevirt-dra-conformance/driver/emulation/kerneltree"
)

// Real tools read the EMULATED tree as they read the kernel's: lspci (pciutils, over
// sysfs) and lsblk (util-linux, --sysroot) print the same for the EMULATED controllers
// as for the recorded kernel's tree, laid out as files, modulo the node's device
// numbers and each function's bus addresses (IRQ, BAR). The tools are this host's; the recording keeps what the reference VM's own
// versions printed.
func TestRealToolsReadTheEmulatedTreeAsTheKernels(t *testing.T) {
	rec := recording(t)
	boot := rec.Snapshots()[0]
	kernel := t.TempDir()
	if err := apply(kernel, kerneltree.Diff(nil, withoutDeviceNodes(boot))); err != nil {
		t.Fatal(err)
	}
	emulated := recordedMachineRoot(t, rec)
	// Modulo the node's device numbers and the addresses firmware gave each function.
	numbers := regexp.MustCompile(`\b[0-9]+:[0-9]+\b|IRQ [0-9]+|Memory at [0-9a-f]+`)
	for _, tool := range []struct {
		name string
		argv func(root, bdf string) []string
	}{
		{"lspci", func(root, bdf string) []string {
			return []string{"lspci", "-O", "sysfs.path=" + filepath.Join(root, "sys/bus/pci"), "-vvv", "-nn", "-s", bdf}
		}},
		{"lsblk", func(root, _ string) []string {
			return []string{"lsblk", "--sysroot", root, "--json", "--output",
				"NAME,KNAME,MAJ:MIN,SIZE,TYPE,MODEL,SERIAL,REV,TRAN,WWN,RO,RM,LOG-SEC,PHY-SEC,DISC-MAX,SCHED,RQ-SIZE,SUBSYSTEMS"}
		}},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			t.Skipf("%s is not installed (Debian: pciutils, util-linux)", tool.name)
		}
		for _, bdf := range rec.Functions["nvme"] {
			want := run(t, tool.argv(kernel, bdf))
			got := run(t, tool.argv(emulated, bdf))
			if tool.name == "lsblk" {
				want, got = byController(t, want), byController(t, got)
			}
			if numbers.ReplaceAllString(got, "#") != numbers.ReplaceAllString(want, "#") {
				t.Errorf("%s of %s:\nEMULATED:\n%s\nkernel:\n%s", tool.name, bdf, got, want)
			}
			if strings.TrimSpace(want) == "" || strings.TrimSpace(want) == "[]" {
				t.Errorf("%s printed nothing for the kernel's tree: nothing was compared", tool.name)
			}
		}
	}
}

// byController is lsblk's list of disks by their controller's serial, without the
// names and numbers the kernel gives in the order of (asynchronous) probes.
func byController(t *testing.T, out string) string {
	t.Helper()
	var listing struct {
		Devices []map[string]any `json:"blockdevices"`
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil {
		t.Fatalf("lsblk: %v\n%s", err, out)
	}
	for _, disk := range listing.Devices {
		delete(disk, "name")
		delete(disk, "kname")
		delete(disk, "maj:min")
	}
	sort.Slice(listing.Devices, func(i, j int) bool {
		return fmt.Sprint(listing.Devices[i]["serial"]) < fmt.Sprint(listing.Devices[j]["serial"])
	})
	b, _ := json.MarshalIndent(listing.Devices, "", " ")
	return string(b)
}

// withoutDeviceNodes: the recorded nodes carry the reference kernel's numbers, which
// may be this host's own disks'; the tools read sysfs.
func withoutDeviceNodes(snap kerneltree.Snapshot) kerneltree.Snapshot {
	out := kerneltree.Snapshot{}
	for p, e := range snap {
		if e.Kind != "char" && e.Kind != "block" && !strings.HasPrefix(p, "proc/") {
			out[p] = e
		}
	}
	return out
}

// recordedMachineRoot is an EMULATED machine like the recorded one.
func recordedMachineRoot(t *testing.T, rec kerneltree.Recording) string {
	t.Helper()
	controllers, cpus, err := RecordedMachine(rec)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := Build(root, controllers, string(devices), cpus); err != nil {
		t.Fatal(err)
	}
	return root
}

func run(t *testing.T, argv []string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}
