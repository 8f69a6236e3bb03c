// Command nri-emulated-pci is an EMULATION for hosts without a PCI bus (the hermetic
// cluster): an NRI plugin of the node's containerd that shows every container the node's
// EMULATED PCI tree where the kernel would show the real one. sysfs is not namespaced for
// PCI, so on real hardware every container sees /sys/bus/pci, /sys/devices/pci0000:00
// and /sys/kernel/iommu_groups of its host; here those are folders of the node that the
// fresh sysfs of a container does not have, so this plugin bind-mounts them over it,
// read-only exactly when the container's /sys is. Containers that mount the node's /sys
// themselves (hostPath) already see the tree and are left alone. It changes nothing
// else, and no driver or KubeVirt setting refers to it.
package main

import (
	"context"
	"log"
	"os"
	"slices"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// emulatedParts are the sysfs folders of the node's emulated PCI tree.
var emulatedParts = []string{"/sys/bus/pci", "/sys/devices/pci0000:00", "/sys/kernel/iommu_groups"}

type plugin struct{}

// adjustment returns the mounts a container needs, or nil when it needs none.
func adjustment(ctr *api.Container) *api.ContainerAdjustment {
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
	adjust := &api.ContainerAdjustment{}
	for _, part := range emulatedParts {
		adjust.AddMount(&api.Mount{Destination: part, Source: part, Type: "bind", Options: options})
	}
	return adjust
}

func (plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return adjustment(ctr), nil, nil
}

func main() {
	log.SetPrefix("nri-emulated-pci: EMULATED PCI tree: ")
	opts := []stub.Option{stub.WithOnClose(func() { os.Exit(0) })}
	if os.Getenv(api.PluginNameEnvVar) == "" { // started by hand, not by containerd
		opts = append(opts, stub.WithPluginName("emulated-pci"), stub.WithPluginIdx("10"))
	}
	s, err := stub.New(plugin{}, opts...)
	if err != nil {
		log.Fatalf("cannot create the NRI stub: %v", err)
	}
	if err := s.Run(context.Background()); err != nil {
		log.Fatalf("plugin ended: %v", err)
	}
}
