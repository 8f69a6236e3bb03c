// Package state keeps the driver's prepared claims in a checkpoint file so that a
// plugin restart neither forgets what it prepared nor prepares a device twice.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/kubevirt-dra-conformance/driver/pkg/pci"
)

// PreparedDevice is one device prepared for a claim.
type PreparedDevice struct {
	Request        string       `json:"request"`
	Pool           string       `json:"pool"`
	Device         string       `json:"device"`
	Function       pci.Function `json:"function"` // identity as seen before binding
	OriginalDriver string       `json:"originalDriver"`
	CDIDeviceID    string       `json:"cdiDeviceID"`
}

// PreparedClaim is a claim's prepared devices.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
}

// Checkpoint is the on-disk record, written atomically after every change.
type Checkpoint struct {
	mu     sync.Mutex
	path   string
	Claims map[string]PreparedClaim `json:"claims"` // by claim UID
}

// Load reads the checkpoint at path, or starts an empty one.
func Load(path string) (*Checkpoint, error) {
	cp := &Checkpoint{path: path, Claims: map[string]PreparedClaim{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s is corrupt: %w", path, err)
	}
	if cp.Claims == nil {
		cp.Claims = map[string]PreparedClaim{}
	}
	return cp, nil
}

func (c *Checkpoint) save() error {
	data, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}

// Get returns the prepared claim with this UID.
func (c *Checkpoint) Get(uid string) (PreparedClaim, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc, ok := c.Claims[uid]
	return pc, ok
}

// Holder returns the UID of the claim a device is prepared for, or "".
func (c *Checkpoint) Holder(device string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, pc := range c.Claims {
		for _, d := range pc.Devices {
			if d.Device == device {
				return uid
			}
		}
	}
	return ""
}

// Put records a prepared claim.
func (c *Checkpoint) Put(uid string, pc PreparedClaim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Claims[uid] = pc
	return c.save()
}

// Delete forgets a claim; deleting an unknown claim is not an error.
func (c *Checkpoint) Delete(uid string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.Claims[uid]; !ok {
		return nil
	}
	delete(c.Claims, uid)
	return c.save()
}

// Owned returns, by PCI address, the functions prepared devices had before binding.
func (c *Checkpoint) Owned() map[string]pci.Function {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]pci.Function{}
	for _, pc := range c.Claims {
		for _, d := range pc.Devices {
			out[d.Function.BDF] = d.Function
		}
	}
	return out
}

// UIDs lists prepared claim UIDs in order.
func (c *Checkpoint) UIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.Claims))
	for uid := range c.Claims {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}
