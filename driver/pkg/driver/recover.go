package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubevirt-dra-conformance/driver/pkg/cdi"
	"github.com/kubevirt-dra-conformance/driver/pkg/state"
)

// Annotation keys of the driver's CDI specs: with them a claim's spec records what was
// prepared, so the node itself can rebuild a checkpoint that was lost.
const (
	claimNamespaceKey = "claim-namespace"
	claimNameKey      = "claim-name"
	preparedDeviceKey = "prepared-device"
)

func annotationKey(driverName, key string) string { return driverName + "/" + key }

func (d *Driver) annotation(key string) string { return annotationKey(d.cfg.DriverName, key) }

// LoadCheckpoint reads the checkpoint at path. One that exists but cannot be read
// (corrupt, or of an unknown version) is reported, rebuilt from the claims' CDI specs on
// the node and only then set aside for inspection, so that the driver still starts and
// can give back every device it holds.
func LoadCheckpoint(ctx context.Context, path, driverName string, specs cdi.Spec) (*state.Checkpoint, error) {
	checkpoint, err := state.Load(path)
	if !errors.Is(err, state.ErrUnreadable) {
		return checkpoint, err
	}
	logger := klog.FromContext(ctx)
	claims, skipped, readErr := claimsOnNode(driverName, specs)
	if readErr != nil {
		return nil, errors.Join(err, fmt.Errorf("rebuilding it from the CDI specs: %w", readErr))
	}
	for spec, why := range skipped {
		logger.Error(why, "a CDI spec of this driver does not say what it prepared; its devices stay as they are", "spec", spec)
	}
	aside, moveErr := state.SetAside(path, time.Now())
	if moveErr != nil {
		return nil, errors.Join(err, fmt.Errorf("setting the unreadable checkpoint aside: %w", moveErr))
	}
	checkpoint = state.New(path)
	if writeErr := checkpoint.Replace(claims); writeErr != nil {
		// Put the old file back: the next start tries again rather than start empty.
		return nil, errors.Join(err, writeErr, os.Rename(aside, path))
	}
	logger.Error(err, "checkpoint rebuilt from this driver's CDI specs on the node",
		"setAside", aside, "claims", len(claims))
	return checkpoint, nil
}

// claimsOnNode reads the prepared claims that the driver's CDI specs record; specs that
// record nothing usable are returned apart, with the reason.
func claimsOnNode(driverName string, specs cdi.Spec) (map[string]state.PreparedClaim, map[string]error, error) {
	found, skipped, err := specs.Claims()
	if err != nil {
		return nil, nil, err
	}
	claims := map[string]state.PreparedClaim{}
	for uid, spec := range found {
		claim := state.PreparedClaim{
			Namespace: spec.Annotations[annotationKey(driverName, claimNamespaceKey)],
			Name:      spec.Annotations[annotationKey(driverName, claimNameKey)],
		}
		for _, dev := range spec.Devices {
			var record state.PreparedDevice
			raw, ok := dev.Annotations[annotationKey(driverName, preparedDeviceKey)]
			problem := fmt.Errorf("device %s has no %s annotation", dev.Name, preparedDeviceKey)
			if ok {
				problem = json.Unmarshal([]byte(raw), &record)
			}
			if problem != nil {
				skipped["claim "+uid] = problem
				break
			}
			claim.Devices = append(claim.Devices, record)
		}
		if skipped["claim "+uid] == nil {
			claims[uid] = claim
		}
	}
	return claims, skipped, nil
}
