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
	"time"

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
	// AdminAccess: prepared for an admin-access claim (KEP-5018), which observes a
	// device without holding it: nothing bound, nothing to give back.
	AdminAccess bool `json:"adminAccess,omitempty"`
}

// PreparedClaim is a claim's prepared devices.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
}

// Version names the checkpoint format; a file of any other version is not read.
const Version = "checkpoint.nvme.dra.kubevirt-conformance.io/v1"

// ErrUnreadable marks a checkpoint that exists but cannot be used (corrupt, or written
// in a format this driver does not know): the caller rebuilds it from the node.
var ErrUnreadable = errors.New("checkpoint unreadable")

// Checkpoint is the on-disk record, written durably after every change.
type Checkpoint struct {
	mu      sync.Mutex
	path    string
	Version string                   `json:"version"`
	Claims  map[string]PreparedClaim `json:"claims"` // by claim UID
}

// New is an empty checkpoint stored at path.
func New(path string) *Checkpoint {
	return &Checkpoint{path: path, Version: Version, Claims: map[string]PreparedClaim{}}
}

// Load reads the checkpoint at path, or starts an empty one. A file that exists but
// cannot be used is an error wrapping ErrUnreadable.
func Load(path string) (*Checkpoint, error) {
	cp := New(path)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return nil, err
	}
	cp.Version = ""
	if err := json.Unmarshal(data, cp); err != nil {
		return nil, fmt.Errorf("%w: %s is corrupt: %v", ErrUnreadable, path, err)
	}
	if cp.Version == "" {
		cp.Version = Version // the format before versions had the same claims; the next save adds it
	}
	if cp.Version != Version {
		return nil, fmt.Errorf("%w: %s has version %q, this driver reads %q",
			ErrUnreadable, path, cp.Version, Version)
	}
	if cp.Claims == nil {
		cp.Claims = map[string]PreparedClaim{}
	}
	return cp, nil
}

// SetAside renames an unreadable checkpoint out of the way, keeping it for inspection,
// and returns its new path.
func SetAside(path string, now time.Time) (string, error) {
	aside := fmt.Sprintf("%s.unreadable-%s", path, now.UTC().Format("20060102T150405Z"))
	return aside, os.Rename(path, aside)
}

// Replace stores claims as the whole checkpoint (a rebuild from the node).
func (c *Checkpoint) Replace(claims map[string]PreparedClaim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Claims = claims
	return c.save()
}

// save writes the checkpoint so that a crash leaves either the old or the new file,
// both complete: write and fsync a temporary file, rename it, fsync the folder.
func (c *Checkpoint) save() error {
	data, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(c.path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return err
	}
	folder, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = folder.Close() }()
	return folder.Sync()
}

// Get returns the prepared claim with this UID.
func (c *Checkpoint) Get(uid string) (PreparedClaim, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc, ok := c.Claims[uid]
	return pc, ok
}

// Holder returns the UID of the claim a device is prepared for, or "" (admin-access
// claims observe a device; they hold none).
func (c *Checkpoint) Holder(device string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, pc := range c.Claims {
		for _, d := range pc.Devices {
			if d.Device == device && !d.AdminAccess {
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
