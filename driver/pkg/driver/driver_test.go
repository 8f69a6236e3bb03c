package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs"
	"github.com/kubevirt-dra-conformance/driver/emulation/sysfs/sysfstest"
	"github.com/kubevirt-dra-conformance/driver/pkg/cdi"
	"github.com/kubevirt-dra-conformance/driver/pkg/inventory"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

const driverName = "nvme.dra.kubevirt-conformance.io"

type node struct {
	root, cdiDir, checkpoint string
	host                     inventory.Host
}

func newNode(t *testing.T) node {
	t.Helper()
	dir := t.TempDir()
	n := node{
		cdiDir:     filepath.Join(dir, "cdi"),
		checkpoint: filepath.Join(dir, "state", "checkpoint.json"),
		host:       inventory.Host{MountsFile: filepath.Join(dir, "mounts")},
	}
	if err := os.WriteFile(n.host.MountsFile, []byte("/dev/vda / ext4 rw 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.root = sysfstest.Machine(t, sysfs.KubevirtciControllers([]int64{1 << 30, 1 << 30}))
	return n
}

// start runs a driver process on the node (a new one after a "restart").
func (n node) start(t *testing.T) *Driver {
	t.Helper()
	specs := cdi.Spec{Vendor: driverName, Dir: n.cdiDir, DevRoot: "/dev"}
	cp, err := LoadCheckpoint(context.Background(), n.checkpoint, driverName, specs)
	if err != nil {
		t.Fatal(err)
	}
	sys := pci.Sysfs{Root: n.root}
	d := New(Config{
		DriverName: driverName, NodeName: "node01", Sysfs: sys,
		Binder: pci.Binder{Sysfs: sys, Settle: 2 * time.Second}, Host: n.host,
		CDI: specs, Checkpoint: cp, HealthInterval: time.Second,
		Fatal: func(err error) { t.Errorf("fatal: %v", err) },
	})
	if _, _, err := d.Rescan(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d
}

func claim(uid, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "dev", Driver: driverName, Pool: "node01", Device: device},
			}},
		}},
	}
}

func prepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return res[c.UID]
}

func unprepare(t *testing.T, d *Driver, uid string) error {
	t.Helper()
	res, err := d.UnprepareResourceClaims(context.Background(),
		[]kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
	if err != nil {
		t.Fatal(err)
	}
	return res[types.UID(uid)]
}

func TestPrepareBindsDescribesAndIsIdempotent(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	first := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0"))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	dev := first.Devices[0]
	if dev.PoolName != "node01" || dev.DeviceName != "nvme-0000-00-05-0" ||
		dev.CDIDeviceIDs[0] != driverName+"/vfio=uid-a-nvme-0000-00-05-0" {
		t.Fatalf("device %+v", dev)
	}
	bus := dev.Metadata.Attributes["resource.kubernetes.io/pciBusID"].StringValue
	serial := dev.Metadata.Attributes["serial"].StringValue
	if bus == nil || *bus != "0000:00:05.0" || serial == nil || *serial != "nvme-0" {
		t.Fatalf("metadata attributes %+v", dev.Metadata.Attributes)
	}
	if got := (pci.Sysfs{Root: n.root}).BoundDriver("0000:00:05.0"); got != pci.VFIODriver {
		t.Fatalf("bound to %q", got)
	}
	if _, err := os.Stat(filepath.Join(n.cdiDir, driverName+"-vfio_uid-a.json")); err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	second := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0"))
	if second.Err != nil || second.Devices[0].CDIDeviceIDs[0] != dev.CDIDeviceIDs[0] {
		t.Fatalf("prepare twice must give the same answer: %+v", second)
	}
}

func TestADeviceIsNeverPreparedForTwoClaims(t *testing.T) {
	d := newNode(t).start(t)
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := prepare(t, d, claim("uid-b", "nvme-0000-00-05-0")); r.Err == nil {
		t.Fatal("second claim on a prepared device must fail")
	}
}

func TestUnprepareRestoresTheDeviceAndIsIdempotent(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-06-0")); r.Err != nil {
		t.Fatal(r.Err)
	}
	for i := 0; i < 2; i++ {
		if err := unprepare(t, d, "uid-a"); err != nil {
			t.Fatalf("unprepare #%d: %v", i+1, err)
		}
	}
	fn, _ := (pci.Sysfs{Root: n.root}).Read("0000:00:06.0")
	if fn.Driver != "nvme" || fn.Serial != "nvme-1" {
		t.Fatalf("device not given back: %+v", fn)
	}
	if _, err := os.Stat(filepath.Join(n.cdiDir, driverName+"-vfio_uid-a.json")); !os.IsNotExist(err) {
		t.Fatal("CDI spec left behind")
	}
	if err := unprepare(t, d, "never-prepared"); err != nil {
		t.Fatalf("unknown claim: %v", err)
	}
}

func TestPreparedClaimsSurviveAPluginRestart(t *testing.T) {
	n := newNode(t)
	before := prepare(t, n.start(t), claim("uid-a", "nvme-0000-00-05-0"))
	if before.Err != nil {
		t.Fatal(before.Err)
	}
	restarted := n.start(t)
	devices, _, err := restarted.Rescan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 2 {
		t.Fatalf("a device bound by us must stay advertised after restart, got %d", len(devices))
	}
	again := prepare(t, restarted, claim("uid-a", "nvme-0000-00-05-0"))
	if again.Err != nil || again.Devices[0].CDIDeviceIDs[0] != before.Devices[0].CDIDeviceIDs[0] {
		t.Fatalf("after restart: %+v", again)
	}
	if r := prepare(t, restarted, claim("uid-b", "nvme-0000-00-05-0")); r.Err == nil {
		t.Fatal("restart must not forget which claim holds the device")
	}
	if err := unprepare(t, restarted, "uid-a"); err != nil {
		t.Fatal(err)
	}
	if fn, _ := (pci.Sysfs{Root: n.root}).Read("0000:00:05.0"); fn.Driver != "nvme" {
		t.Fatalf("restore after restart: %+v", fn)
	}
}

func TestPrepareRejectsUnknownAndUnallocatedClaims(t *testing.T) {
	d := newNode(t).start(t)
	if r := prepare(t, d, claim("uid-x", "nvme-does-not-exist")); r.Err == nil {
		t.Fatal("unknown device must fail")
	}
	c := claim("uid-y", "nvme-0000-00-05-0")
	c.Status.Allocation = nil
	if r := prepare(t, d, c); r.Err == nil {
		t.Fatal("unallocated claim must fail")
	}
}

func adminClaim(uid, device string) *resourceapi.ResourceClaim {
	c := claim(uid, device)
	admin := true
	c.Status.Allocation.Devices.Results[0].AdminAccess = &admin
	return c
}

func TestAnAdminAccessClaimObservesAHeldDeviceWithoutTakingIt(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-05-0")); r.Err != nil {
		t.Fatal(r.Err)
	}
	observed := prepare(t, d, adminClaim("uid-admin", "nvme-0000-00-05-0"))
	if observed.Err != nil {
		t.Fatalf("an admin-access claim must be prepared for a held device: %v", observed.Err)
	}
	spec, err := os.ReadFile(filepath.Join(n.cdiDir, driverName+"-vfio_uid-admin.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(spec), "0000:00:05.0") || strings.Contains(string(spec), "/dev/vfio") {
		t.Fatalf("an observer gets the env naming the device, not its VFIO group: %s", spec)
	}
	if err := unprepare(t, d, "uid-admin"); err != nil {
		t.Fatal(err)
	}
	sys := pci.Sysfs{Root: n.root}
	if got := sys.BoundDriver("0000:00:05.0"); got != pci.VFIODriver {
		t.Fatalf("the observer's unprepare took the device from its holder: bound to %q", got)
	}
	if r := prepare(t, d, claim("uid-b", "nvme-0000-00-05-0")); r.Err == nil {
		t.Fatal("the holder still holds the device after the observer is gone")
	}
	if err := unprepare(t, d, "uid-a"); err != nil {
		t.Fatal(err)
	}
	if got := sys.BoundDriver("0000:00:05.0"); got != "nvme" {
		t.Fatalf("the holder's unprepare must give the device back: bound to %q", got)
	}
}

func TestAnAdminAccessClaimDoesNotBlockAClaimThatHoldsTheDevice(t *testing.T) {
	n := newNode(t)
	d := n.start(t)
	if r := prepare(t, d, adminClaim("uid-admin", "nvme-0000-00-06-0")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := (pci.Sysfs{Root: n.root}).BoundDriver("0000:00:06.0"); got != "nvme" {
		t.Fatalf("an observer must not bind the device: bound to %q", got)
	}
	if r := prepare(t, d, claim("uid-a", "nvme-0000-00-06-0")); r.Err != nil {
		t.Fatalf("a holder after an observer: %v", r.Err)
	}
}
