package cdi

import (
	"os"
	"path/filepath"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func TestSpecCarriesVFIONodesAndTheEnvContract(t *testing.T) {
	dir := t.TempDir()
	s := Spec{Vendor: "nvme.dra.kubevirt-conformance.io", Dir: dir, DevRoot: "/host/dev"}
	edits := []DeviceEdits{{Name: "uid1-nvme-0000-00-05-0", PCIAddress: "0000:00:05.0",
		Serial: "nvme-0", IOMMUGroup: 10, Request: "dev"}}
	if err := s.Write("uid1", nil, edits); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nvme.dra.kubevirt-conformance.io-vfio_uid1.json")
	parsed, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatalf("the CDI library must parse our spec: %v", err)
	}
	dev := parsed.GetDevice("uid1-nvme-0000-00-05-0")
	if dev == nil {
		t.Fatal("device missing from spec")
	}
	edits0 := dev.ContainerEdits
	if got := edits0.Env; len(got) != 2 || got[0] != "DRA_NVME_DEV_PCI_ADDRESS=0000:00:05.0" || got[1] != "DRA_NVME_DEV_SERIAL=nvme-0" {
		t.Errorf("env = %v", got)
	}
	nodes := edits0.DeviceNodes
	if len(nodes) != 2 || nodes[0].Path != "/dev/vfio/vfio" || nodes[1].Path != "/dev/vfio/10" || nodes[1].HostPath != "/host/dev/vfio/10" {
		t.Errorf("device nodes = %+v", nodes)
	}
	if q := s.QualifiedName("uid1-nvme-0000-00-05-0"); q != "nvme.dra.kubevirt-conformance.io/vfio=uid1-nvme-0000-00-05-0" {
		t.Errorf("qualified name %s", q)
	}
	if err := s.Remove("uid1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("spec not removed")
	}
	if err := s.Remove("uid1"); err != nil {
		t.Fatalf("second remove must be fine: %v", err)
	}
}

func TestEnvNameSanitizesRequestNames(t *testing.T) {
	if got := EnvName("gpu-a/sub.1", "PCI_ADDRESS"); got != "DRA_NVME_GPU_A_SUB_1_PCI_ADDRESS" {
		t.Errorf("EnvName = %s", got)
	}
}

func TestASpecWithoutDevicesIsInvalidSoNoneIsWritten(t *testing.T) {
	dir := t.TempDir()
	s := Spec{Vendor: "nvme.dra.kubevirt-conformance.io", Dir: dir, DevRoot: "/dev"}
	empty, err := s.Build(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err := cache.WriteSpec(empty, "empty.json"); err == nil {
		t.Fatal("the CDI library accepted a spec without devices; the driver's guard would be moot")
	}
	if err := s.Write("uid1", map[string]string{"a.example.com/k": "v"}, nil); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Fatalf("nothing to inject must write nothing, found %v", files)
	}
}

func TestClaimsReadsBackTheAnnotationsOfThisDriversSpecs(t *testing.T) {
	dir := t.TempDir()
	s := Spec{Vendor: "nvme.dra.kubevirt-conformance.io", Dir: dir, DevRoot: "/dev"}
	other := Spec{Vendor: "gpu.example.com", Dir: dir, DevRoot: "/dev"}
	edits := []DeviceEdits{{Name: "uid1-nvme-0000-00-05-0", PCIAddress: "0000:00:05.0", IOMMUGroup: 10,
		Request: "dev", Annotations: map[string]string{"nvme.dra.kubevirt-conformance.io/prepared-device": "{}"}}}
	if err := s.Write("uid1", map[string]string{"nvme.dra.kubevirt-conformance.io/claim-name": "c"}, edits); err != nil {
		t.Fatal(err)
	}
	if err := other.Write("uid2", nil, []DeviceEdits{{Name: "uid2-gpu", IOMMUGroup: 11, Request: "gpu"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvme.dra.kubevirt-conformance.io-vfio_uid3.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	claims, unreadable, err := s.Claims()
	if err != nil {
		t.Fatal(err)
	}
	if len(unreadable) != 1 {
		t.Fatalf("our broken spec must be named apart: %v", unreadable)
	}
	got, ok := claims["uid1"]
	if len(claims) != 1 || !ok || got.Annotations["nvme.dra.kubevirt-conformance.io/claim-name"] != "c" ||
		got.Devices[0].Annotations["nvme.dra.kubevirt-conformance.io/prepared-device"] != "{}" {
		t.Fatalf("claims %+v", claims)
	}
}
