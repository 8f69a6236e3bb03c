// Package cdi writes the CDI specs that give a container the VFIO nodes of the devices
// prepared for a claim, and the env contract that names their PCI addresses. Specs go
// through the CDI library's cache: it validates them, and writes and removes them the
// way container runtimes expect.
package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Class makes the CDI kind "<vendor>/<class>".
const Class = "vfio"

// Spec describes one claim's CDI devices.
type Spec struct {
	Vendor  string // the driver name
	Dir     string // /var/run/cdi
	DevRoot string // host /dev (emulated trees put it elsewhere)
}

// DeviceEdits is what one prepared device adds to a container.
type DeviceEdits struct {
	Name       string // CDI device name: unique per claim, never reused
	PCIAddress string
	Serial     string
	IOMMUGroup int
	Request    string
	// Observe: an admin-access claim's device (KEP-5018): the env that names it, not
	// the VFIO group another claim's container may hold.
	Observe     bool
	Annotations map[string]string // the driver's own record of the device
}

// ClaimSpec is a claim's spec as found on the node.
type ClaimSpec struct {
	Annotations map[string]string
	Devices     []DeviceEdits // Name and Annotations only
}

// Kind is "<vendor>/vfio".
func (s Spec) Kind() string { return s.Vendor + "/" + Class }

// QualifiedName is the CDI device id the kubelet passes to the runtime.
func (s Spec) QualifiedName(device string) string {
	return parser.QualifiedName(s.Vendor, Class, device)
}

// fileName is the transient spec's name: tied to the claim, so never reused.
func (s Spec) fileName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(s.Vendor, Class, claimUID) + ".json"
}

func (s Spec) cache() *cdiapi.Cache {
	// NewCache's error is always nil (kept for API compatibility, see its doc).
	cache, _ := cdiapi.NewCache(cdiapi.WithSpecDirs(s.Dir), cdiapi.WithAutoRefresh(false))
	return cache
}

// EnvName is the documented env contract: DRA_NVME_<REQUEST>_PCI_ADDRESS (and _SERIAL),
// the request name uppercased with non-alphanumerics as underscores.
func EnvName(request, suffix string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(request) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteRune('_')
		}
	}
	return "DRA_NVME_" + b.String() + "_" + suffix
}

// Build returns the CDI spec for a claim's devices, at the oldest CDI version that can
// carry it (so older runtimes read it too).
func (s Spec) Build(annotations map[string]string, devices []DeviceEdits) (*specs.Spec, error) {
	spec := &specs.Spec{Kind: s.Kind(), Annotations: annotations}
	for _, d := range devices {
		edits := specs.ContainerEdits{
			Env: []string{
				EnvName(d.Request, "PCI_ADDRESS") + "=" + d.PCIAddress,
				EnvName(d.Request, "SERIAL") + "=" + d.Serial,
			},
		}
		if !d.Observe {
			group := fmt.Sprintf("/dev/vfio/%d", d.IOMMUGroup)
			edits.DeviceNodes = []*specs.DeviceNode{
				{Path: "/dev/vfio/vfio", HostPath: filepath.Join(s.DevRoot, "vfio", "vfio")},
				{Path: group, HostPath: filepath.Join(s.DevRoot, "vfio", fmt.Sprint(d.IOMMUGroup))},
			}
		}
		spec.Devices = append(spec.Devices, specs.Device{
			Name: d.Name, Annotations: d.Annotations, ContainerEdits: edits,
		})
	}
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, err
	}
	spec.Version = version
	return spec, nil
}

// Write stores a claim's spec, validated by the CDI library. A claim with nothing to
// inject gets no spec: a spec without devices is invalid, and the CDI library (so the
// runtime too) would then report errors for this driver's specs.
func (s Spec) Write(claimUID string, annotations map[string]string, devices []DeviceEdits) error {
	if len(devices) == 0 {
		return s.Remove(claimUID)
	}
	spec, err := s.Build(annotations, devices)
	if err != nil {
		return err
	}
	return s.cache().WriteSpec(spec, s.fileName(claimUID))
}

// Remove deletes a claim's spec; a missing spec is fine (idempotent). A spec written
// before specs went through the library has its older name, "<vendor>-<uid>.json".
func (s Spec) Remove(claimUID string) error {
	cache := s.cache()
	legacy := strings.ReplaceAll(s.Vendor, "/", "_") + "-" + claimUID + ".json"
	return errors.Join(cache.RemoveSpec(s.fileName(claimUID)), cache.RemoveSpec(legacy))
}

// Claims reads this driver's specs on the node through the CDI library: the claims, by
// UID, and apart from them, by path, the specs of ours that the library cannot read.
func (s Spec) Claims() (map[string]ClaimSpec, map[string]error, error) {
	// The library's scan drops a folder it cannot read; that must not look like "none".
	if _, err := os.ReadDir(s.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	prefix := cdiapi.GenerateTransientSpecName(s.Vendor, Class, "")
	cache := s.cache() // a new cache has scanned the folder
	unreadable := map[string]error{}
	// The errors name specs of every vendor in the folder; only ours matter here.
	for path, errs := range cache.GetErrors() {
		if strings.HasPrefix(filepath.Base(path), prefix) {
			unreadable[path] = errors.Join(errs...)
		}
	}
	claims := map[string]ClaimSpec{}
	for _, spec := range cache.GetVendorSpecs(s.Vendor) {
		if spec.GetClass() != Class {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(spec.GetPath()), filepath.Ext(spec.GetPath()))
		uid, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		claim := ClaimSpec{Annotations: spec.Annotations}
		for _, d := range spec.Devices {
			claim.Devices = append(claim.Devices, DeviceEdits{Name: d.Name, Annotations: d.Annotations})
		}
		claims[uid] = claim
	}
	return claims, unreadable, nil
}
