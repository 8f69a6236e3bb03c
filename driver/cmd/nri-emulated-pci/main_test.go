package main

import (
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
	got := mounts(adjustment(ctr))
	if len(got) != 3 {
		t.Fatalf("want the three parts of the tree, got %v", got)
	}
	for dest, opts := range got {
		if opts[len(opts)-1] != "ro" {
			t.Errorf("%s: want read-only like the container's /sys, got %v", dest, opts)
		}
	}
	ctr.Mounts[0].Options = []string{"nosuid"}
	for dest, opts := range mounts(adjustment(ctr)) {
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
	if adj := adjustment(ctr); adj != nil {
		t.Fatalf("want no adjustment, got %v", adj)
	}
}
