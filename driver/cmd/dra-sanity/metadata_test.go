package main

import (
	"strings"
	"testing"
)

// As the kubeletplugin helper writes a claim's file with EnableDeviceMetadata and both
// versions: the newest first, then the one KubeVirt 1.8 and 1.9 read.
const bothVersions = `{"kind":"DeviceMetadata","apiVersion":"metadata.resource.k8s.io/v1beta1","metadata":{"name":"c","namespace":"ns","uid":"u1","generation":1},"requests":[{"name":"dev","devices":[{"driver":"nvme.example.com","pool":"node-1","name":"nvme-0","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:00:04.0"}}}]}]}
{"kind":"DeviceMetadata","apiVersion":"metadata.resource.k8s.io/v1alpha1","metadata":{"name":"c","namespace":"ns","uid":"u1","generation":1},"requests":[{"name":"dev","devices":[{"driver":"nvme.example.com","pool":"node-1","name":"nvme-0","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:00:04.0"}}}]}]}
`

func TestBothVersionsDecodeAndEachObjectIsReadableOnItsOwn(t *testing.T) {
	report, err := decodeMetadata([]byte(bothVersions))
	if err != nil {
		t.Fatal(err)
	}
	if report.DecodeError != "" || report.ValidationError != "" {
		t.Fatalf("decode %q, validation %q", report.DecodeError, report.ValidationError)
	}
	if report.DecodedVersion != "metadata.resource.k8s.io/v1beta1" {
		t.Fatalf("the decoder takes the first object it knows, got %s", report.DecodedVersion)
	}
	if got := report.Metadata.Requests[0].Devices[0].Name; got != "nvme-0" {
		t.Fatalf("device %q", got)
	}
	if len(report.Objects) != 2 || !report.Objects[0].Decodes || !report.Objects[1].Decodes {
		t.Fatalf("objects %+v", report.Objects)
	}
}

func TestOnlyAnUnknownVersionLeavesNothingToDecode(t *testing.T) {
	future := strings.ReplaceAll(strings.SplitN(bothVersions, "\n", 2)[0], "v1beta1", "v2")
	report, err := decodeMetadata([]byte(future))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(report.DecodeError, "no compatible metadata version") {
		t.Fatalf("decode error %q", report.DecodeError)
	}
	if report.Objects[0].Decodes || report.Objects[0].APIVersion != "metadata.resource.k8s.io/v2" {
		t.Fatalf("objects %+v", report.Objects)
	}
}

func TestADeviceWithoutDriverFailsValidation(t *testing.T) {
	invalid := strings.ReplaceAll(bothVersions, `"driver":"nvme.example.com",`, "")
	report, err := decodeMetadata([]byte(invalid))
	if err != nil {
		t.Fatal(err)
	}
	if report.ValidationError == "" || report.Objects[1].ValidationError == "" {
		t.Fatalf("want validation errors, got %+v", report)
	}
}

func TestNotJSONIsAnError(t *testing.T) {
	if _, err := decodeMetadata([]byte("{not json")); err == nil {
		t.Fatal("want an error")
	}
}
