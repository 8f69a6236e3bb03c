// Command nvme-sysfs-emulator is an EMULATION for hosts without a PCI bus: it builds a
// sysfs tree of QEMU-like NVMe controllers (as kubevirtci's --nvme adds them), their
// device state (identity and media, see sysfs.WriteDeviceState) and /dev/vfio nodes,
// then plays the kernel's part in driver binding.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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
	root := flag.String("root", "", "where the emulated sysfs tree goes")
	devRoot := flag.String("dev-root", "", "where the emulated /dev/vfio nodes go")
	state := flag.String("device-state", "", "where each controller's own state (serial, model, persistent media) goes")
	once := flag.Bool("build-only", false, "build the tree and exit")
	flag.Var(&nvme, "nvme", "add an NVMe controller of this size (repeat, like kubevirtci --nvme)")
	flag.Parse()
	if *root == "" || *devRoot == "" || *state == "" || len(nvme) == 0 {
		fmt.Fprintln(os.Stderr, "usage: nvme-sysfs-emulator --root DIR --dev-root DIR --device-state DIR --nvme 1G [--nvme 1G ...]")
		os.Exit(2)
	}
	controllers := sysfs.KubevirtciControllers(nvme)
	if err := setUp(*root, *devRoot, *state, controllers); err != nil {
		klog.ErrorS(err, "EMULATION: building the NVMe tree failed")
		os.Exit(1)
	}
	klog.InfoS("EMULATION: NVMe sysfs tree ready", "root", *root, "controllers", len(controllers))
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

func setUp(root, devRoot, state string, controllers []sysfs.Controller) error {
	if _, err := os.Stat(filepath.Join(root, "bus/pci/devices")); os.IsNotExist(err) {
		if err := sysfs.Build(root, controllers); err != nil {
			return err
		}
	}
	for _, c := range controllers {
		if err := sysfs.WriteDeviceState(state, c); err != nil {
			return err
		}
	}
	devices, err := os.ReadFile("/proc/devices")
	if err != nil {
		return err
	}
	groupMajor, err := sysfs.FreeDynamicMajor(string(devices))
	if err != nil {
		return err
	}
	// Numbers of their own, as the kernel gives them: the container (misc 10:196) and
	// each group a minor of the vfio driver's dynamic major. No driver is behind them
	// here, so nothing may open them; only the EMULATED QEMU front would, and it knows.
	if err := charDevice(filepath.Join(devRoot, "vfio", "vfio"), sysfs.MiscMajor, sysfs.VFIOMinor); err != nil {
		return err
	}
	for _, c := range controllers {
		if err := charDevice(filepath.Join(devRoot, "vfio", strconv.Itoa(c.IOMMUGroup)), groupMajor, uint32(c.IOMMUGroup)); err != nil {
			return err
		}
	}
	klog.InfoS("EMULATION: /dev/vfio nodes made with no driver behind them", "container", fmt.Sprintf("%d:%d", sysfs.MiscMajor, sysfs.VFIOMinor), "groupMajor", groupMajor)
	return nil
}

// charDevice makes (or remakes, when an earlier emulator gave it other numbers) a
// character node major:minor: the container runtime sees a real device node.
func charDevice(path string, major, minor uint32) error {
	want := unix.Mkdev(major, minor)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == want {
			return nil
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return unix.Mknod(path, unix.S_IFCHR|0o666, int(want))
}
