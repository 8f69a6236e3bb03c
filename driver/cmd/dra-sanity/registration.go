package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// endpointFromRegistry finds a driver's DRA socket as the kubelet does: it asks each
// registration socket in dir for its PluginInfo and takes the endpoint of the newest
// DRA plugin registered under that name. A driver that rolls out with a socket per pod
// (the kubeletplugin helper's RollingUpdate) has no fixed socket path.
func endpointFromRegistry(dir, driver string, timeout time.Duration) (string, error) {
	sockets, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return "", err
	}
	newestFirst := func(i, j int) bool { return modTime(sockets[i]).After(modTime(sockets[j])) }
	sort.SliceStable(sockets, newestFirst)
	for _, socket := range sockets {
		info, err := pluginInfo(socket, timeout)
		if err != nil {
			continue // a stale socket of a plugin that is gone, as the kubelet skips it
		}
		if info.Type != registerapi.DRAPlugin || info.Name != driver {
			continue
		}
		// As the kubelet does: talk to the plugin only in a service it says it serves.
		if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
			return "", fmt.Errorf("DRA plugin %q registered at %s serves %v, not %s, which "+
				"this client (and a kubelet of 1.34 or later) speaks", driver, socket,
				info.SupportedVersions, drapb.DRAPluginService)
		}
		return info.Endpoint, nil
	}
	return "", fmt.Errorf("no DRA plugin %q registered in %s (%d registration sockets)",
		driver, dir, len(sockets))
}

func modTime(path string) time.Time {
	info, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return info.ModTime()
}

func pluginInfo(socket string, timeout time.Duration) (*registerapi.PluginInfo, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
}
