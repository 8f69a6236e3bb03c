// Package driver implements the kubelet plugin of the reference NVMe DRA driver:
// prepare binds a controller to vfio-pci and describes it through CDI and KEP-5304
// device metadata; unprepare gives it back to its original driver.
package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/kubevirt-dra-conformance/driver/pkg/cdi"
	"github.com/kubevirt-dra-conformance/driver/pkg/inventory"
	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
	"github.com/kubevirt-dra-conformance/driver/pkg/state"
)

// Config is everything the driver needs to know about its node.
type Config struct {
	DriverName string
	NodeName   string
	Sysfs      pci.Sysfs
	Binder     pci.Binder
	Host       inventory.Host
	CDI        cdi.Spec
	Checkpoint *state.Checkpoint
	// Fatal ends the plugin on an error the helper reports as not recoverable, so that
	// the kubelet's restart starts it afresh (the helper's documented contract).
	Fatal func(error)
	// NUMAForm is the form of the standard numaNode attribute; the list form needs the
	// cluster's DRAListTypeAttributes gate, which only the operator knows.
	NUMAForm deviceattribute.AttributeForm
	// HealthInterval is how often device health is checked and re-sent to the kubelet.
	HealthInterval time.Duration
}

// Driver is the DRAPlugin. The helper serializes gRPC calls; the mutex also covers the
// rescan loop.
type Driver struct {
	cfg       Config
	mu        sync.Mutex
	devices   map[string]inventory.Device // by device name, as last published
	published []resourceapi.Device
}

// New creates a driver; call Rescan before publishing.
func New(cfg Config) *Driver {
	if cfg.Fatal == nil {
		cfg.Fatal = func(err error) {
			klog.ErrorS(err, "fatal error, exiting")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}
	return &Driver{cfg: cfg, devices: map[string]inventory.Device{}}
}

// Rescan re-reads sysfs. It returns the devices to publish and whether they changed.
func (d *Driver) Rescan(ctx context.Context) ([]resourceapi.Device, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	devices, excluded, err := inventory.Discover(d.cfg.Sysfs, d.cfg.Host, d.cfg.Checkpoint.Owned(), d.cfg.NUMAForm)
	if err != nil {
		return nil, false, err
	}
	logger := klog.FromContext(ctx)
	for _, e := range excluded {
		logger.V(2).Info("not advertising controller", "pciBusID", e.BDF, "reason", e.Reason)
	}
	d.devices = map[string]inventory.Device{}
	for _, dev := range devices {
		d.devices[dev.Name] = dev
	}
	api := inventory.APIDevices(devices)
	changed := !reflect.DeepEqual(api, d.published)
	d.published = api
	return api, changed, nil
}

// Resources is the driver's single pool, named after its node.
func (d *Driver) Resources(devices []resourceapi.Device) resourceslice.DriverResources {
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{
			d.cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
		},
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim,
) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		devices, err := d.prepare(ctx, claim)
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	if done, ok := d.cfg.Checkpoint.Get(uid); ok {
		return d.results(done), nil // idempotent: same answer, nothing redone
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	claimAnnotations := map[string]string{
		d.annotation(claimNamespaceKey): claim.Namespace, d.annotation(claimNameKey): claim.Name,
	}
	prepared := state.PreparedClaim{Namespace: claim.Namespace, Name: claim.Name}
	var edits []cdi.DeviceEdits
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != d.cfg.DriverName {
			continue
		}
		// A device is (driver, pool, name): another node's pool has devices of the same
		// names, and preparing ours for them would hand out the wrong device.
		if result.Pool != d.cfg.NodeName {
			return nil, d.rollback(uid, prepared, fmt.Errorf("device %s of pool %s is not this node's (pool %s)",
				result.Device, result.Pool, d.cfg.NodeName))
		}
		// An admin-access result (KEP-5018) observes a device another claim may hold.
		admin := result.AdminAccess != nil && *result.AdminAccess
		if holder := d.cfg.Checkpoint.Holder(result.Device); holder != "" && !admin {
			return nil, d.rollback(uid, prepared, fmt.Errorf("device %s is already prepared for claim %s", result.Device, holder))
		}
		dev, ok := d.devices[result.Device]
		if !ok {
			return nil, d.rollback(uid, prepared, fmt.Errorf("device %s is not on node %s (or no longer advertisable)",
				result.Device, d.cfg.NodeName))
		}
		fn, original, err := d.claimFunction(dev, admin)
		if err != nil {
			return nil, d.rollback(uid, prepared, err)
		}
		cdiName := uid + "-" + dev.Name
		record := state.PreparedDevice{
			Request: result.Request, Pool: result.Pool, Device: result.Device, Function: fn,
			OriginalDriver: original, CDIDeviceID: d.cfg.CDI.QualifiedName(cdiName), AdminAccess: admin,
		}
		prepared.Devices = append(prepared.Devices, record)
		recorded, err := json.Marshal(record)
		if err != nil {
			return nil, d.rollback(uid, prepared, err)
		}
		edits = append(edits, cdi.DeviceEdits{
			Name: cdiName, PCIAddress: fn.BDF, Serial: fn.Serial, IOMMUGroup: fn.IOMMUGroup, Observe: admin,
			Request:     resourceclaim.BaseRequestRef(result.Request),
			Annotations: map[string]string{d.annotation(preparedDeviceKey): string(recorded)},
		})
	}
	if err := d.cfg.CDI.Write(uid, claimAnnotations, edits); err != nil {
		return nil, d.rollback(uid, prepared, fmt.Errorf("writing CDI spec: %w", err))
	}
	if err := d.cfg.Checkpoint.Put(uid, prepared); err != nil {
		return nil, d.rollback(uid, prepared, fmt.Errorf("writing checkpoint: %w", err))
	}
	klog.FromContext(ctx).Info("prepared claim", "claim", klog.KObj(claim), "devices", len(prepared.Devices))
	return d.results(prepared), nil
}

// claimFunction binds a device's function to vfio-pci for a claim that holds it (its
// original driver is returned, to give it back to) and finds its IOMMU group; an
// admin-access claim only reads the group: the function stays as its holder left it.
func (d *Driver) claimFunction(dev inventory.Device, admin bool) (pci.Function, string, error) {
	fn := dev.Function
	original := ""
	if !admin {
		var err error
		if original, err = d.cfg.Binder.Bind(fn.BDF, pci.VFIODriver); err != nil {
			return fn, "", fmt.Errorf("binding %s to vfio-pci: %w", fn.BDF, err)
		}
	}
	fn.IOMMUGroup = d.cfg.Sysfs.IOMMUGroup(fn.BDF)
	if fn.IOMMUGroup < 0 {
		noGroup := fmt.Errorf("%s has no IOMMU group: VFIO passthrough needs an IOMMU", fn.BDF)
		if admin {
			return fn, "", noGroup
		}
		return fn, "", errors.Join(noGroup, d.cfg.Binder.Restore(fn.BDF, original))
	}
	return fn, original, nil
}

// rollback returns devices bound during a failed prepare to their drivers and removes
// the claim's CDI spec: the spec is what a checkpoint rebuild reads.
func (d *Driver) rollback(uid string, prepared state.PreparedClaim, cause error) error {
	errs := []error{cause, d.cfg.CDI.Remove(uid)}
	for _, dev := range prepared.Devices {
		if !dev.AdminAccess {
			errs = append(errs, d.cfg.Binder.Restore(dev.Function.BDF, dev.OriginalDriver))
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) results(pc state.PreparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(pc.Devices))
	for _, dev := range pc.Devices {
		attrs := d.describe(dev).Attributes()
		out = append(out, kubeletplugin.Device{
			// The request as the allocation names it, "<request>/<subrequest>" for a
			// firstAvailable subrequest, as the KEP-5304 metadata API says an entry is
			// named (DeviceMetadataRequest.Name); the helper files it under the base
			// request and hands the kubelet the base name.
			Requests:     []string{dev.Request},
			PoolName:     dev.Pool,
			DeviceName:   dev.Device,
			CDIDeviceIDs: []string{dev.CDIDeviceID},
			Metadata:     &kubeletplugin.DeviceMetadata{Attributes: toStringKeys(attrs)},
		})
	}
	return out
}

// describe is the device as last discovered; a device gone from the node since is
// described by its checkpointed identity alone.
func (d *Driver) describe(dev state.PreparedDevice) inventory.Device {
	if found, ok := d.devices[dev.Device]; ok {
		return found
	}
	return inventory.Device{Name: dev.Device, Function: dev.Function}
}

func toStringKeys(in map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[string]resourceapi.DeviceAttribute {
	out := make(map[string]resourceapi.DeviceAttribute, len(in))
	for k, v := range in {
		out[string(k)] = v
	}
	return out
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Unknown claims are fine.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject,
) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, claim := range claims {
		out[claim.UID] = d.unprepare(ctx, string(claim.UID))
	}
	return out, nil
}

func (d *Driver) unprepare(ctx context.Context, uid string) error {
	prepared, ok := d.cfg.Checkpoint.Get(uid)
	if !ok {
		return d.cfg.CDI.Remove(uid)
	}
	logger := klog.FromContext(ctx)
	for _, dev := range prepared.Devices {
		if dev.AdminAccess {
			continue // observed, never bound: its holder gives it back
		}
		if !d.cfg.Sysfs.Present(dev.Function.BDF) {
			// Hot-removed: nothing to give back, and refusing would keep the pod from
			// ever terminating.
			logger.Info("device left the PCI bus while prepared; nothing to give back",
				"claim", uid, "pciBusID", dev.Function.BDF)
			continue
		}
		if err := d.cfg.Binder.Restore(dev.Function.BDF, dev.OriginalDriver); err != nil {
			return fmt.Errorf("returning %s to %q: %w", dev.Function.BDF, dev.OriginalDriver, err)
		}
	}
	if err := d.cfg.CDI.Remove(uid); err != nil {
		return err
	}
	logger.Info("unprepared claim", "uid", uid, "devices", len(prepared.Devices))
	return d.cfg.Checkpoint.Delete(uid)
}

// HandleError implements kubeletplugin.DRAPlugin: every background error is logged with
// its context; the helper retries recoverable ones itself, any other ends the plugin.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cfg.Fatal(fmt.Errorf("%s: %w", msg, err))
	}
}
