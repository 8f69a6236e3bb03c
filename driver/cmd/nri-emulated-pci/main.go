// Command nri-emulated-pci is an EMULATION for hosts without a PCI bus (the hermetic
// cluster): a node service, registered with the node's containerd as an NRI plugin,
// that shows every container the node's EMULATED PCI tree where the kernel would show
// the real one. sysfs is not namespaced for PCI, so on real hardware every container
// sees /sys/bus/pci, /sys/devices/pci0000:00 and /sys/kernel/iommu_groups of its host;
// here those are folders of the node that the fresh sysfs of a container does not have,
// so this plugin bind-mounts them over it, read-only exactly when the container's /sys
// is. Containers that mount the node's /sys themselves (hostPath) already see the tree
// and are left alone.
//
// It also plays the part of the device behind a VFIO group: a container that holds
// /dev/vfio/<group> gets, for each function of that group, the function's own state
// (its serial, model and media; on hardware these live in the device) at
// /var/lib/kdc-emulated-pci/<bdf>, where the EMULATED VFIO hop in the launcher's QEMU
// finds it; and setting RLIMIT_MEMLOCK there is EMULATED (withEmulatedMemlock). It
// changes nothing else, and no driver or KubeVirt setting refers to it.
package main

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"google.golang.org/protobuf/proto"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
)

// emulatedParts are the sysfs folders of the node's emulated PCI tree.
var emulatedParts = []string{"/sys/bus/pci", "/sys/devices/pci0000:00", "/sys/kernel/iommu_groups"}

// node is where the node shows its PCI tree and its functions' state.
type node struct{ sysfs, deviceState string }

type plugin struct{ node node }

// adjustment returns the mounts a container needs, or nil when it needs none.
func (n node) adjustment(ctr *api.Container) *api.ContainerAdjustment {
	adjust := &api.ContainerAdjustment{}
	for _, part := range treeMounts(ctr) {
		adjust.AddMount(part)
	}
	held := n.functionsHeldBy(ctr)
	for _, bdf := range held {
		state := filepath.Join(n.deviceState, bdf)
		adjust.AddMount(&api.Mount{Destination: filepath.Join(sysfs.DeviceStateRoot, bdf), Source: state,
			Type: "bind", Options: []string{"rbind", "nosuid", "nodev", "noexec"}})
	}
	if len(held) > 0 {
		if policy := withEmulatedMemlock(ctr.GetLinux().GetSeccompPolicy()); policy != nil {
			adjust.SetLinuxSeccompPolicy(policy)
		}
	}
	if len(adjust.GetMounts()) == 0 {
		return nil
	}
	return adjust
}

// treeMounts are the parts of the tree a container with a fresh sysfs needs.
func treeMounts(ctr *api.Container) []*api.Mount {
	readOnly := false
	sysfs := false
	for _, m := range ctr.GetMounts() {
		if m.GetDestination() != "/sys" {
			continue
		}
		if m.GetType() != "sysfs" {
			return nil // the node's own /sys, with the tree in it
		}
		sysfs = true
		readOnly = slices.Contains(m.GetOptions(), "ro")
	}
	if !sysfs {
		return nil
	}
	options := []string{"rbind", "nosuid", "nodev", "noexec"}
	if readOnly {
		options = append(options, "ro")
	}
	var out []*api.Mount
	for _, part := range emulatedParts {
		out = append(out, &api.Mount{Destination: part, Source: part, Type: "bind", Options: options})
	}
	return out
}

// functionsHeldBy lists the functions of every IOMMU group whose /dev/vfio/<group> the
// container holds (a privileged container holds them all) and that have state.
func (n node) functionsHeldBy(ctr *api.Container) []string {
	var out []string
	for _, dev := range ctr.GetLinux().GetDevices() {
		dir, group := filepath.Split(dev.GetPath())
		if _, err := strconv.Atoi(group); dir != "/dev/vfio/" || err != nil {
			continue
		}
		members, _ := os.ReadDir(filepath.Join(n.sysfs, "kernel/iommu_groups", group, "devices"))
		for _, member := range members {
			if _, err := os.Stat(filepath.Join(n.deviceState, member.Name())); err == nil {
				out = append(out, member.Name())
			}
		}
	}
	return out
}

// withEmulatedMemlock is policy with the calls that set RLIMIT_MEMLOCK sent to the
// EMULATED memlock agent (memlock.go); nil when policy cannot be extended.
func withEmulatedMemlock(policy *api.LinuxSeccomp) *api.LinuxSeccomp {
	out := &api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ALLOW"}
	if policy != nil {
		for _, rule := range policy.GetSyscalls() {
			if rule.GetErrnoRet() != nil {
				// containerd 2.2's NRI v0.11.0 dereferences a nil pointer converting a
				// rule's errno (api.ToOCILinuxSyscalls), which takes containerd down.
				log.Printf("EMULATED memlock: left out of a container whose seccomp policy sets errno values (NRI v0.11.0 cannot pass them on)")
				return nil
			}
		}
		out = proto.Clone(policy).(*api.LinuxSeccomp)
	}
	out.ListenerPath = memlockSocket
	out.Syscalls = append(out.Syscalls,
		&api.LinuxSyscall{Names: []string{"prlimit64"}, Action: "SCMP_ACT_NOTIFY",
			Args: []*api.LinuxSeccompArg{
				{Index: 1, Value: rlimitMemlock, Op: "SCMP_CMP_EQ"},
				{Index: 2, Value: 0, Op: "SCMP_CMP_NE"}, // setting, not only reading
			}},
		&api.LinuxSyscall{Names: []string{"setrlimit"}, Action: "SCMP_ACT_NOTIFY",
			Args: []*api.LinuxSeccompArg{{Index: 0, Value: rlimitMemlock, Op: "SCMP_CMP_EQ"}}})
	return out
}

func (p plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return p.node.adjustment(ctr), nil, nil
}

// registeredMarker tells the node that containerd has registered the plugin; the node
// starts its kubelet only then (EMULATED_PCI_NRI_REGISTERED in kubevirtci/local).
const registeredMarker = "/run/kdc-emulated-pci/registered"

// reconnectPause spaces the attempts to reach containerd's NRI socket.
const reconnectPause = time.Second

func main() {
	log.SetPrefix("nri-emulated-pci: ")
	limits := &memlockLimits{set: map[int]record{}, proc: procStatus, real: realMemlock,
		now: ticksSinceBoot, allCaps: hostCapabilities()}
	if err := serveMemlock(limits); err != nil {
		log.Fatalf("cannot serve the EMULATED memlock agent: %v", err)
	}
	_ = os.Remove(registeredMarker)
	// A node service, not a plugin containerd starts: containerd closes a plugin that
	// misses a request timeout (and kills one it started, with the memlock agent of
	// every running VM). This one connects again and keeps the agent.
	p := plugin{node{sysfs: "/sys", deviceState: sysfs.DeviceStateRoot}}
	for {
		if err := runOnce(p); err != nil {
			log.Printf("NRI: %v; connecting again", err)
		} else {
			log.Printf("NRI: containerd closed the connection; connecting again " +
				"(containers created until then lack the EMULATED PCI tree)")
		}
		_ = os.Remove(registeredMarker)
		time.Sleep(reconnectPause) // no event to wait on: containerd's socket is polled
	}
}

// runOnce registers the plugin with containerd and serves it until the connection ends.
func runOnce(p plugin) error {
	s, err := stub.New(p, stub.WithPluginName("emulated-pci"), stub.WithPluginIdx("10"),
		stub.WithOnClose(func() {}))
	if err != nil {
		return err
	}
	if err := s.Start(context.Background()); err != nil {
		return err
	}
	if err := os.WriteFile(registeredMarker, nil, 0o644); err != nil {
		return err
	}
	s.Wait()
	return nil
}
