package driver

import (
	"context"
	"sort"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/kubevirt-dra-conformance/driver/pkg/inventory"
)

// WatchHealthStatus implements kubeletplugin.DRAPlugin: the health of every advertised
// or prepared controller, checked on the node and re-sent each HealthInterval (well
// within the kubelet's timeout, so a report never goes stale while the plugin runs).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	ticker := time.NewTicker(d.cfg.HealthInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.HealthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// HealthReport checks each advertised or prepared controller once. The node is read
// outside the driver's lock: a prepare waiting for a bind must not delay the report.
func (d *Driver) HealthReport() kubeletplugin.DeviceHealthReport {
	addresses := map[string]string{} // by device name
	d.mu.Lock()
	for name, dev := range d.devices {
		addresses[name] = dev.Function.BDF
	}
	d.mu.Unlock()
	for bdf := range d.cfg.Checkpoint.Owned() {
		addresses[inventory.DeviceName(bdf)] = bdf
	}
	now := time.Now()
	report := kubeletplugin.DeviceHealthReport{}
	for name, bdf := range addresses {
		health := kubeletplugin.DeviceHealth{
			PoolName: d.cfg.NodeName, DeviceName: name, Health: kubeletplugin.HealthStatusHealthy,
			LastUpdated: now, HealthCheckTimeout: 3 * d.cfg.HealthInterval,
		}
		if problem := d.cfg.Sysfs.Problem(bdf); problem != "" {
			health.Health, health.Message = kubeletplugin.HealthStatusUnhealthy, problem
		}
		report.Devices = append(report.Devices, health)
	}
	sort.Slice(report.Devices, func(i, j int) bool {
		return report.Devices[i].DeviceName < report.Devices[j].DeviceName
	})
	return report
}
