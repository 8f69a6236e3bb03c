// Package kerneltree records what a Linux kernel shows of a set of devices (their sysfs
// entries and /dev nodes) as a Snapshot, in one form for a real kernel (the reference,
// recorded in a TCG VM by cmd/kernel-reference) and for the EMULATED tree, so that the
// emulation can be held against the kernel it stands in for.
package kerneltree

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Entry is one file, folder, link or device node as the kernel shows it.
type Entry struct {
	Kind   string `json:"kind"`             // dir, file, link, char, block
	Mode   string `json:"mode"`             // permission bits, octal
	Value  string `json:"value,omitempty"`  // a readable file's content; "hex:..." when binary
	Target string `json:"target,omitempty"` // a link's target, as readlink gives it
	Device string `json:"device,omitempty"` // a device node's major:minor
	Error  string `json:"error,omitempty"`  // what reading a readable file answered instead
}

// Snapshot holds entries by their path relative to the root ("sys/...", "dev/...").
type Snapshot map[string]Entry

// maxValue caps a file's recorded content: sysfs attributes are one page at most, a
// PCI function's config space four pages.
const maxValue = 16 << 10

// unread are attributes whose read has side effects or touches the device itself
// (BARs, option ROM, VPD): their presence and mode are recorded, not their content.
var unread = regexp.MustCompile(`^(resource[0-9]+(_wc)?|rom|vpd)$`)

// Capture records every path of patterns (globs relative to root) and, for folders,
// everything below them; links are recorded, never followed.
func Capture(root string, patterns []string) (Snapshot, error) {
	snap := Snapshot{}
	for _, pattern := range patterns {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", pattern, err)
		}
		for _, match := range matches {
			if err := capturePath(root, match, snap); err != nil {
				return nil, err
			}
		}
	}
	return snap, nil
}

func capturePath(root, path string, snap Snapshot) error {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return err
	}
	if _, seen := snap[rel]; seen {
		return nil
	}
	info, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // went away while walking (a device being removed)
	}
	if err != nil {
		return err
	}
	entry := Entry{Mode: fmt.Sprintf("%04o", info.Mode().Perm())}
	switch {
	case info.Mode()&os.ModeSymlink != 0:
		entry.Kind = "link"
		entry.Target, err = os.Readlink(path)
		if err != nil {
			return err
		}
	case info.IsDir():
		entry.Kind = "dir"
		snap[rel] = entry
		children, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, child := range children {
			if err := capturePath(root, filepath.Join(path, child.Name()), snap); err != nil {
				return err
			}
		}
		return nil
	case info.Mode()&os.ModeDevice != 0:
		entry.Kind = "block"
		if info.Mode()&os.ModeCharDevice != 0 {
			entry.Kind = "char"
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		entry.Device = fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	default:
		entry.Kind = "file"
		if info.Mode().Perm()&0o444 != 0 && !unread.MatchString(filepath.Base(path)) {
			entry.Value, entry.Error = readValue(path)
		}
	}
	snap[rel] = entry
	return nil
}

func readValue(path string) (string, string) {
	f, err := os.Open(path)
	if err != nil {
		return "", errorText(err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxValue))
	if err != nil {
		return "", errorText(err)
	}
	if utf8.Valid(b) && !strings.ContainsRune(string(b), 0) {
		return string(b), ""
	}
	return "hex:" + hex.EncodeToString(b), ""
}

// errorText is the errno's text alone: the path is the entry's key already.
func errorText(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// Change is what one step did to a snapshot.
type Change struct {
	Added   Snapshot `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed Snapshot `json:"changed,omitempty"` // the entries' new form
}

// Diff is the change from before to after.
func Diff(before, after Snapshot) Change {
	change := Change{Added: Snapshot{}, Changed: Snapshot{}}
	for path, entry := range after {
		old, had := before[path]
		switch {
		case !had:
			change.Added[path] = entry
		case old != entry:
			change.Changed[path] = entry
		}
	}
	for path := range before {
		if _, kept := after[path]; !kept {
			change.Removed = append(change.Removed, path)
		}
	}
	sort.Strings(change.Removed)
	return change
}

// Apply is the snapshot after change.
func (s Snapshot) Apply(change Change) Snapshot {
	out := make(Snapshot, len(s))
	for path, entry := range s {
		out[path] = entry
	}
	for _, path := range change.Removed {
		delete(out, path)
	}
	for path, entry := range change.Added {
		out[path] = entry
	}
	for path, entry := range change.Changed {
		out[path] = entry
	}
	return out
}
