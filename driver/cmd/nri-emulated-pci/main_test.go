package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

func mounts(adjust *api.ContainerAdjustment) map[string][]string {
	out := map[string][]string{}
	for _, m := range adjust.GetMounts() {
		out[m.GetDestination()] = m.GetOptions()
	}
	return out
}

func TestAContainerWithItsOwnSysfsSeesTheTreeReadOnlyWhenSysfsIs(t *testing.T) {
	ctr := &api.Container{Mounts: []*api.Mount{{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "ro"}}}}
	got := mounts(node{}.adjustment(ctr))
	if len(got) != 3 {
		t.Fatalf("want the three parts of the tree, got %v", got)
	}
	for dest, opts := range got {
		if opts[len(opts)-1] != "ro" {
			t.Errorf("%s: want read-only like the container's /sys, got %v", dest, opts)
		}
	}
	ctr.Mounts[0].Options = []string{"nosuid"}
	for dest, opts := range mounts(node{}.adjustment(ctr)) {
		if opts[len(opts)-1] == "ro" {
			t.Errorf("%s: a privileged container's sysfs is writable, so is the tree: %v", dest, opts)
		}
	}
}

func TestAContainerWithTheNodesSysIsLeftAlone(t *testing.T) {
	ctr := &api.Container{Mounts: []*api.Mount{
		{Destination: "/sys", Type: "sysfs", Source: "sysfs"},
		{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind"}},
	}}
	if adj := (node{}).adjustment(ctr); adj != nil {
		t.Fatalf("want no adjustment, got %v", adj)
	}
}

// The container that holds a VFIO group gets its functions' state, and only that.
func TestAContainerHoldingAVFIOGroupGetsItsFunctionsState(t *testing.T) {
	root := t.TempDir()
	n := node{sysfs: filepath.Join(root, "sys"), deviceState: filepath.Join(root, "state")}
	for group, bdf := range map[string]string{"10": "0000:00:05.0", "11": "0000:00:06.0"} {
		for _, dir := range []string{
			filepath.Join(n.sysfs, "kernel/iommu_groups", group, "devices", bdf),
			filepath.Join(n.deviceState, bdf),
		} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctr := &api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{
		{Path: "/dev/vfio/vfio", Type: "c"}, {Path: "/dev/vfio/11", Type: "c"}, {Path: "/dev/null", Type: "c"},
	}}}
	adjust := n.adjustment(ctr)
	got := adjust.GetMounts()
	if len(got) != 1 || got[0].GetDestination() != "/var/lib/kdc-emulated-pci/0000:00:06.0" ||
		got[0].GetSource() != filepath.Join(n.deviceState, "0000:00:06.0") {
		t.Fatalf("want the state of group 11's function only, got %v", got)
	}
	rules := adjust.GetLinux().GetSeccompPolicy().GetSyscalls()
	if len(rules) != 2 || rules[0].GetNames()[0] != "prlimit64" || rules[0].GetAction() != "SCMP_ACT_NOTIFY" ||
		adjust.GetLinux().GetSeccompPolicy().GetListenerPath() != memlockSocket {
		t.Fatalf("want RLIMIT_MEMLOCK settings sent to the EMULATED memlock agent, got %v", rules)
	}
	if adj := n.adjustment(&api.Container{}); adj != nil {
		t.Fatalf("a container without VFIO groups or sysfs needs nothing, got %v", adj)
	}
}

// A container's own seccomp policy is kept; the EMULATED rules come on top.
func TestTheEmulatedMemlockKeepsTheContainersPolicy(t *testing.T) {
	own := &api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ERRNO", Syscalls: []*api.LinuxSyscall{{Names: []string{"read"}, Action: "SCMP_ACT_ALLOW"}}}
	got := withEmulatedMemlock(own)
	if got.GetDefaultAction() != "SCMP_ACT_ERRNO" || len(got.GetSyscalls()) != 3 || len(own.GetSyscalls()) != 1 {
		t.Fatalf("got %v from %v", got, own)
	}
	own.Syscalls[0].ErrnoRet = &api.OptionalUInt32{Value: 38}
	if got := withEmulatedMemlock(own); got != nil {
		t.Fatalf("a policy with errno values must be left alone (NRI v0.11.0 crashes on them), got %v", got)
	}
}
