package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

func TestAClaimWithNothingForThisDriverGetsNoSpecAndBreaksNoLaterClaim(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	other := claim("uid-other", "gpu-0")
	other.Status.Allocation.Devices.Results[0].Driver = "gpu.example.com"
	if r := prepare(t, d, other); r.Err != nil || len(r.Devices) != 0 {
		t.Fatalf("a claim without devices of this driver prepares to nothing: %+v", r)
	}
	if specs, _ := filepath.Glob(filepath.Join(n.cdiDir, "*")); len(specs) != 0 {
		t.Fatalf("no spec may be written for it, found %v", specs)
	}
	mine := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0"))
	if mine.Err != nil {
		t.Fatal(mine.Err)
	}
	cache, _ := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
	if err := cache.Refresh(); err != nil {
		t.Fatalf("the runtime's CDI library reports errors: %v", err)
	}
	if cache.GetDevice(mine.Devices[0].CDIDeviceIDs[0]) == nil {
		t.Fatalf("%s does not resolve", mine.Devices[0].CDIDeviceIDs[0])
	}
}

func TestASubrequestIsAnsweredByItsFullNameAndEnvNamesTheBaseRequest(t *testing.T) {
	d := newNode(t).start(t)
	c := claim("uid-a", "nvme-0000-00-05-0")
	c.Status.Allocation.Devices.Results[0].Request = "disk/fast"
	r := prepare(t, d, c)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := r.Devices[0].Requests; len(got) != 1 || got[0] != "disk/fast" {
		t.Fatalf("requests %v: the metadata API names a subrequest's entry disk/fast", got)
	}
	cache, _ := cdiapi.NewCache(cdiapi.WithSpecDirs(d.cfg.CDI.Dir), cdiapi.WithAutoRefresh(false))
	env := cache.GetDevice(r.Devices[0].CDIDeviceIDs[0]).ContainerEdits.Env
	if !strings.HasPrefix(env[0], "DRA_NVME_DISK_PCI_ADDRESS=") {
		t.Fatalf("env %v", env)
	}
}

func TestOnlyErrorsTheHelperCallsRecoverableKeepThePluginRunning(t *testing.T) {
	var fatal []error
	d := New(Config{Fatal: func(err error) { fatal = append(fatal, err) }})
	ctx := context.Background()
	d.HandleError(ctx, errors.Join(errors.New("slice publish conflict"), kubeletplugin.ErrRecoverable), "publishing")
	if len(fatal) != 0 {
		t.Fatalf("a recoverable error ended the plugin: %v", fatal)
	}
	d.HandleError(ctx, errors.New("dropped fields"), "publishing ResourceSlices")
	if len(fatal) != 1 || !strings.Contains(fatal[0].Error(), "publishing ResourceSlices: dropped fields") {
		t.Fatalf("a fatal error must end the plugin with its context, got %v", fatal)
	}
}

func TestAnUnreadableCheckpointIsSetAsideAndRebuiltFromTheNode(t *testing.T) {
	for name, content := range map[string]string{
		"corrupt":         `{"version": "checkpoint.nvme.dra.kubevirt-conformance.io/v1", "claims": {`,
		"unknown version": `{"version": "checkpoint.nvme.dra.kubevirt-conformance.io/v9", "claims": {}}`,
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			before := prepare(t, n.start(t), claim("uid-a", "nvme-0000-00-05-0"))
			if before.Err != nil {
				t.Fatal(before.Err)
			}
			if err := os.WriteFile(n.checkpoint, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			restarted := n.start(t)
			if aside, _ := filepath.Glob(n.checkpoint + ".unreadable-*"); len(aside) != 1 {
				t.Fatalf("the unreadable file must be kept aside, found %v", aside)
			}
			again := prepare(t, restarted, claim("uid-a", "nvme-0000-00-05-0"))
			if again.Err != nil || again.Devices[0].CDIDeviceIDs[0] != before.Devices[0].CDIDeviceIDs[0] {
				t.Fatalf("after the rebuild: %+v", again)
			}
			if r := prepare(t, restarted, claim("uid-b", "nvme-0000-00-05-0")); r.Err == nil {
				t.Fatal("the rebuild must remember which claim holds the device")
			}
			if err := unprepare(t, restarted, "uid-a"); err != nil {
				t.Fatal(err)
			}
			if fn, _ := (pci.Sysfs{Root: n.root}).Read("0000:00:05.0"); fn.Driver != "nvme" || fn.Serial != "nvme-0" {
				t.Fatalf("the device must go back to nvme: %+v", fn)
			}
		})
	}
}

func healthOf(report kubeletplugin.DeviceHealthReport, device string) kubeletplugin.DeviceHealth {
	for _, h := range report.Devices {
		if h.DeviceName == device {
			return h
		}
	}
	return kubeletplugin.DeviceHealth{}
}

func TestAControllerRemovedFromTheBusIsReportedUnhealthy(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0")); r.Err != nil {
		t.Fatal(r.Err)
	}
	report := d.HealthReport()
	if len(report.Devices) != 2 {
		t.Fatalf("every advertised or prepared controller is reported: %+v", report)
	}
	for _, h := range report.Devices {
		if h.Health != kubeletplugin.HealthStatusHealthy || h.PoolName != "node01" || h.HealthCheckTimeout <= time.Second {
			t.Fatalf("before removal: %+v", h)
		}
	}
	removal := filepath.Join((pci.Sysfs{Root: n.root}).DevicePath("0000:00:05.0"), "remove")
	if err := os.WriteFile(removal, []byte("1"), 0o200); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for healthOf(d.HealthReport(), "nvme-0000-00-05-0").Health != kubeletplugin.HealthStatusUnhealthy {
		if time.Now().After(deadline) {
			t.Fatalf("a removed controller must turn unhealthy: %+v", d.HealthReport())
		}
		time.Sleep(10 * time.Millisecond)
	}
	gone := healthOf(d.HealthReport(), "nvme-0000-00-05-0")
	if !strings.Contains(gone.Message, "removed from the PCI bus") {
		t.Fatalf("message %q", gone.Message)
	}
	if other := healthOf(d.HealthReport(), "nvme-0000-00-06-0"); other.Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("the other controller is fine: %+v", other)
	}
}

func TestAClaimWhoseDeviceLeftTheBusUnpreparesSoItsPodCanEnd(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0")); r.Err != nil {
		t.Fatal(r.Err)
	}
	sys := pci.Sysfs{Root: n.root}
	if err := os.WriteFile(filepath.Join(sys.DevicePath("0000:00:05.0"), "remove"), []byte("1"), 0o200); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sys.Present("0000:00:05.0") {
		if time.Now().After(deadline) {
			t.Fatal("the emulated kernel did not take the function off the bus")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := unprepare(t, d, "uid-a"); err != nil {
		t.Fatalf("unprepare must succeed for a device that is gone: %v", err)
	}
	if _, held := d.cfg.Checkpoint.Get("uid-a"); held {
		t.Fatal("the claim must be forgotten")
	}
}

func TestWatchHealthStatusSendsAtOnceAndStopsWithItsContext(t *testing.T) {
	d := newNode(t).start(t)
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	select {
	case r := <-reports:
		if len(r.Devices) != 2 {
			t.Fatalf("first report %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no report at the start of the watch")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a canceled watch returns nil, got %v", err)
	}
}

func TestAFunctionWithoutIOMMUGroupIsGivenBackAndLeavesNoSpec(t *testing.T) {
	n := newNode(t)
	sys := pci.Sysfs{Root: n.root}
	if err := os.Remove(filepath.Join(sys.DevicePath("0000:00:05.0"), "iommu_group")); err != nil {
		t.Fatal(err)
	}
	d := n.start(t)
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0")); r.Err == nil || !strings.Contains(r.Err.Error(), "IOMMU") {
		t.Fatalf("prepare must fail naming the IOMMU: %+v", r)
	}
	if fn, _ := sys.Read("0000:00:05.0"); fn.Driver != "nvme" {
		t.Fatalf("the function must go back to nvme, is on %q", fn.Driver)
	}
	if specs, _ := filepath.Glob(filepath.Join(n.cdiDir, "*")); len(specs) != 0 {
		t.Fatalf("a failed prepare leaves no spec, found %v", specs)
	}
}

func TestADeviceOfAnotherNodesPoolIsRefusedAndAFailedClaimLeavesNothingBound(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	other := claim("uid-o", "nvme-0000-00-05-0")
	other.Status.Allocation.Devices.Results[0].Pool = "node02" // same device name, other node
	if r := prepare(t, d, other); r.Err == nil || !strings.Contains(r.Err.Error(), "node02") {
		t.Fatalf("want a refusal naming the other pool, got %+v", r)
	}
	// The first device binds, the second is unknown: the claim fails as a whole.
	both := claim("uid-b", "nvme-0000-00-05-0")
	both.Status.Allocation.Devices.Results = append(both.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "dev", Driver: driverName, Pool: "node01", Device: "nvme-absent"})
	if r := prepare(t, d, both); r.Err == nil {
		t.Fatal("want an error for the unknown second device")
	}
	if got := (pci.Sysfs{Root: n.root}).BoundDriver("0000:00:05.0"); got == pci.VFIODriver {
		t.Fatal("a failed claim left its first device bound to vfio-pci")
	}
	if entries, _ := os.ReadDir(n.cdiDir); len(entries) != 0 {
		t.Fatalf("a failed claim left CDI specs: %v", entries)
	}
	if r := prepare(t, d, claim("uid-c", "nvme-0000-00-05-0")); r.Err != nil {
		t.Fatalf("the device must be free for the next claim: %v", r.Err)
	}
}
