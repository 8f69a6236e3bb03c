// Package inventory decides which NVMe controllers of a node the driver may hand out
// and describes them as ResourceSlice devices.
package inventory

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

// Device is a controller the driver advertises.
type Device struct {
	Name     string
	Function pci.Function
	Standard []deviceattribute.DeviceAttribute // resource.kubernetes.io/ attributes
}

// Excluded is a controller the driver refuses to advertise, and why.
type Excluded struct {
	BDF    string
	Reason string
}

// Host gives the files that tell which block devices the node itself uses.
type Host struct {
	MountsFile string // /proc/1/mounts of the host
	SwapsFile  string // /proc/swaps of the host
}

// DeviceName is the ResourceSlice name of a controller: a DNS label made from its address.
func DeviceName(bdf string) string {
	return "nvme-" + strings.NewReplacer(":", "-", ".", "-").Replace(bdf)
}

func usedBlockDevices(h Host) (map[string]string, error) {
	used := map[string]string{}
	if err := scanFirstField(h.MountsFile, func(fields []string) {
		if len(fields) >= 2 && strings.HasPrefix(fields[0], "/dev/") {
			used[filepath.Base(fields[0])] = "mounted at " + fields[1]
		}
	}); err != nil {
		return nil, err
	}
	if err := scanFirstField(h.SwapsFile, func(fields []string) {
		if len(fields) >= 1 && strings.HasPrefix(fields[0], "/dev/") {
			used[filepath.Base(fields[0])] = "used as swap"
		}
	}); err != nil {
		return nil, err
	}
	return used, nil
}

func scanFirstField(path string, fn func([]string)) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s (needed to protect the node's own disks): %w", path, err)
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fn(strings.Fields(s.Text()))
	}
	return s.Err()
}

// belongsTo reports whether block device “dev“ is namespace “ns“ or one of its
// partitions (nvme0n1, nvme0n1p2; not nvme0n10).
func belongsTo(dev, ns string) bool {
	return dev == ns || (strings.HasPrefix(dev, ns+"p") && len(dev) > len(ns)+1)
}

// Discover lists the advertisable NVMe controllers. “owned“ holds controllers the
// driver itself bound to vfio-pci (from its checkpoint), with the identity they showed
// before binding: such a controller no longer shows its serial in sysfs.
func Discover(sys pci.Sysfs, host Host, owned map[string]pci.Function, numaForm deviceattribute.AttributeForm,
) ([]Device, []Excluded, error) {
	functions, err := sys.ScanClass(pci.NVMeClass)
	if err != nil {
		return nil, nil, err
	}
	used, err := usedBlockDevices(host)
	if err != nil {
		return nil, nil, err
	}
	var devices []Device
	var excluded []Excluded
	for _, fn := range functions {
		if cached, ok := owned[fn.BDF]; ok {
			cached.Driver = fn.Driver
			fn = cached
		} else if reason := exclusionReason(fn, used); reason != "" {
			excluded = append(excluded, Excluded{BDF: fn.BDF, Reason: reason})
			continue
		}
		standard, err := standardAttributes(sys, fn, numaForm)
		if err != nil {
			return nil, nil, err
		}
		devices = append(devices, Device{Name: DeviceName(fn.BDF), Function: fn, Standard: standard})
	}
	return devices, excluded, nil
}

// standardAttributes come from the DRA library's helpers, read from the node's sysfs.
func standardAttributes(sys pci.Sysfs, fn pci.Function, numaForm deviceattribute.AttributeForm,
) ([]deviceattribute.DeviceAttribute, error) {
	busID, err := deviceattribute.GetPCIBusIDAttribute(fn.BDF)
	if err != nil {
		return nil, err
	}
	root, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(fn.BDF, deviceattribute.WithFSFromRoot(sys.Root))
	if err != nil {
		return nil, fmt.Errorf("PCIe root of %s: %w", fn.BDF, err)
	}
	standard := []deviceattribute.DeviceAttribute{busID, root}
	// A function without NUMA affinity publishes no NUMA node (the helper refuses -1,
	// which would match every other such device).
	if fn.NUMANode >= 0 {
		numa, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(fn.BDF, numaForm,
			deviceattribute.WithFSFromRoot(sys.Root))
		if err != nil {
			return nil, fmt.Errorf("NUMA node of %s: %w", fn.BDF, err)
		}
		standard = append(standard, numa)
	}
	return standard, nil
}

func exclusionReason(fn pci.Function, used map[string]string) string {
	if fn.Driver == pci.VFIODriver {
		return "bound to vfio-pci by someone else (a device plugin or an admin)"
	}
	for _, ns := range fn.Namespaces {
		if len(ns.Holders) > 0 {
			return fmt.Sprintf("namespace %s is held by %s", ns.Name, strings.Join(ns.Holders, ","))
		}
		for dev, why := range used {
			if belongsTo(dev, ns.Name) {
				return fmt.Sprintf("namespace %s (%s) is %s: the node uses it", ns.Name, dev, why)
			}
		}
	}
	return ""
}

// SizeBytes is the controller's total namespace capacity.
func (d Device) SizeBytes() int64 {
	var total int64
	for _, ns := range d.Function.Namespaces {
		total += ns.SizeBytes
	}
	return total
}

// Attributes are the device's ResourceSlice attributes; unqualified names belong to the
// driver's domain.
func (d Device) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	fn := d.Function
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"serial":     {StringValue: ptr.To(fn.Serial)},
		"model":      {StringValue: ptr.To(fn.Model)},
		"vendorID":   {StringValue: ptr.To(fn.VendorID)},
		"deviceID":   {StringValue: ptr.To(fn.DeviceID)},
		"iommuGroup": {IntValue: ptr.To(int64(fn.IOMMUGroup))},
	}
	for _, attr := range d.Standard {
		attrs[attr.Name] = attr.Value
	}
	return attrs
}

// APIDevice is the device as published in a ResourceSlice.
func (d Device) APIDevice() resourceapi.Device {
	return resourceapi.Device{
		Name:       d.Name,
		Attributes: d.Attributes(),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"size": {Value: *resource.NewQuantity(d.SizeBytes(), resource.BinarySI)},
		},
	}
}

// APIDevices publishes devices in name order (stable slices, no spurious updates).
func APIDevices(devices []Device) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(devices))
	for _, d := range devices {
		out = append(out, d.APIDevice())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
