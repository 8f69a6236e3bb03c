package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type registrar struct {
	registerapi.UnimplementedRegistrationServer
	info *registerapi.PluginInfo
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return r.info, nil
}

func serve(t *testing.T, socket string, info *registerapi.PluginInfo) {
	t.Helper()
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, &registrar{info: info})
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
}

func TestEndpointFromRegistryTakesTheNamedDRAPlugin(t *testing.T) {
	dir := t.TempDir()
	serve(t, filepath.Join(dir, "other-reg.sock"),
		&registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "other.example.com", Endpoint: "/o.sock"})
	serve(t, filepath.Join(dir, "csi-reg.sock"),
		&registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "gpu.example.com", Endpoint: "/csi.sock"})
	serve(t, filepath.Join(dir, "gpu.example.com-uid-reg.sock"),
		&registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "gpu.example.com", Endpoint: "/p/dra-uid.sock",
			SupportedVersions: []string{"v1beta1.DRAPlugin", drapb.DRAPluginService}})
	// A socket file nobody serves any more, as a crashed plugin leaves behind.
	if err := os.WriteFile(filepath.Join(dir, "stale-reg.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := endpointFromRegistry(dir, "gpu.example.com", 5*time.Second)
	if err != nil || got != "/p/dra-uid.sock" {
		t.Fatalf("endpoint = %q, %v; want /p/dra-uid.sock", got, err)
	}
	if _, err := endpointFromRegistry(dir, "absent.example.com", time.Second); err == nil {
		t.Fatal("want an error for a driver that is not registered")
	}
}

func TestAPluginThatServesNoV1DRAPluginIsNamedNotCalled(t *testing.T) {
	dir := t.TempDir()
	serve(t, filepath.Join(dir, "old-reg.sock"), &registerapi.PluginInfo{Type: registerapi.DRAPlugin,
		Name: "old.example.com", Endpoint: "/p/old.sock", SupportedVersions: []string{"v1beta1.DRAPlugin"}})
	_, err := endpointFromRegistry(dir, "old.example.com", 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "v1beta1.DRAPlugin") {
		t.Fatalf("want an error naming what the plugin serves, got %v", err)
	}
}
