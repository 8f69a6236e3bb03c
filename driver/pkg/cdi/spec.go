// Package cdi writes the CDI specs that give a container the VFIO nodes of the devices
// prepared for a claim, and the env contract that names their PCI addresses.
package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Vendor and Class make the CDI kind "<vendor>/<class>".
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
}

// Kind is "<vendor>/vfio".
func (s Spec) Kind() string { return s.Vendor + "/" + Class }

// QualifiedName is the CDI device id the kubelet passes to the runtime.
func (s Spec) QualifiedName(device string) string { return s.Kind() + "=" + device }

func (s Spec) path(claimUID string) string {
	return filepath.Join(s.Dir, fmt.Sprintf("%s-%s.json", strings.ReplaceAll(s.Vendor, "/", "_"), claimUID))
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

// Build returns the CDI spec for a claim's devices.
func (s Spec) Build(devices []DeviceEdits) specs.Spec {
	spec := specs.Spec{Version: "0.6.0", Kind: s.Kind()}
	for _, d := range devices {
		group := fmt.Sprintf("/dev/vfio/%d", d.IOMMUGroup)
		spec.Devices = append(spec.Devices, specs.Device{
			Name: d.Name,
			ContainerEdits: specs.ContainerEdits{
				Env: []string{
					EnvName(d.Request, "PCI_ADDRESS") + "=" + d.PCIAddress,
					EnvName(d.Request, "SERIAL") + "=" + d.Serial,
				},
				DeviceNodes: []*specs.DeviceNode{
					{Path: "/dev/vfio/vfio", HostPath: filepath.Join(s.DevRoot, "vfio", "vfio")},
					{Path: group, HostPath: filepath.Join(s.DevRoot, "vfio", fmt.Sprint(d.IOMMUGroup))},
				},
			},
		})
	}
	return spec
}

// Write stores a claim's spec atomically.
func (s Spec) Write(claimUID string, devices []DeviceEdits) error {
	data, err := json.MarshalIndent(s.Build(devices), "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	tmp := s.path(claimUID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.path(claimUID))
}

// Remove deletes a claim's spec; a missing spec is fine (idempotent).
func (s Spec) Remove(claimUID string) error {
	err := os.Remove(s.path(claimUID))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
