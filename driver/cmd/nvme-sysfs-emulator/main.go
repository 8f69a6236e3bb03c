// Command nvme-sysfs-emulator is an EMULATION for hosts without a PCI bus: it builds a
// machine root (sys/, dev/) showing QEMU-like NVMe controllers (as kubevirtci's --nvme
// adds them) as a real kernel shows them (emulation/sysfs), their device state (identity
// and media, see sysfs.WriteDeviceState), then plays the kernel's part in driver binding.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
)

type sizes []int64

func (s *sizes) String() string { return fmt.Sprint(*s) }

// Set parses kubevirtci's size notation: "1G" means 1 GiB.
func (s *sizes) Set(v string) error {
	quantity := v
	if n := len(v); n > 0 && strings.ContainsRune("KMGT", rune(v[n-1])) {
		quantity += "i"
	}
	q, err := resource.ParseQuantity(quantity)
	if err != nil {
		return fmt.Errorf("--nvme %q: %w (use sizes like 1G)", v, err)
	}
	*s = append(*s, q.Value())
	return nil
}

func main() {
	var nvme sizes
	root := flag.String("root", "", "the machine root: its sysfs tree goes in sys/, its /dev in dev/")
	state := flag.String("device-state", "", "where each controller's own state (serial, model, persistent media) goes")
	numaNodes := flag.Int("numa-nodes", 0, "NUMA nodes the machine has (0: none, as QEMU's machines by default); controllers are spread over them in turn, in slot order")
	once := flag.Bool("build-only", false, "build the machine and exit")
	flag.Var(&nvme, "nvme", "add an NVMe controller of this size (repeat, like kubevirtci --nvme)")
	flag.Parse()
	if *root == "" || *state == "" || len(nvme) == 0 || *numaNodes < 0 || *numaNodes > len(nvme) {
		fmt.Fprintln(os.Stderr, "usage: nvme-sysfs-emulator --root DIR --device-state DIR [--numa-nodes N (at most one per controller)] --nvme 1G [--nvme 1G ...]")
		os.Exit(2)
	}
	controllers := sysfs.KubevirtciControllers(nvme)
	for i := range controllers {
		if *numaNodes > 0 {
			controllers[i].NUMANode = i % *numaNodes
		}
	}
	if err := setUp(*root, *state, controllers); err != nil {
		klog.ErrorS(err, "EMULATION: building the NVMe machine failed")
		os.Exit(1)
	}
	klog.InfoS("EMULATION: NVMe controllers shown as the recorded kernel shows them", "root", *root,
		"controllers", len(controllers), "numaNodes", *numaNodes)
	if *once {
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := (sysfs.Kernel{Root: *root}).Run(ctx); err != nil {
		klog.ErrorS(err, "EMULATION: the emulated kernel stopped")
		os.Exit(1)
	}
}

// setUp builds the machine unless an earlier run did (its state is kept across a
// restart, as hardware's), and each controller's device state.
func setUp(root, state string, controllers []sysfs.Controller) error {
	if !sysfs.Built(root) {
		devices, err := os.ReadFile("/proc/devices")
		if err != nil {
			return err
		}
		online, err := os.ReadFile("/sys/devices/system/cpu/online")
		if err != nil {
			return err
		}
		cpus, err := sysfs.OnlineCPUs(string(online))
		if err != nil {
			return err
		}
		if err := sysfs.Build(root, controllers, string(devices), cpus); err != nil {
			return err
		}
	}
	for _, c := range controllers {
		if err := sysfs.WriteDeviceState(state, c); err != nil {
			return err
		}
	}
	return nil
}
