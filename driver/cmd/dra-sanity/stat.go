package main

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// deviceNumber is what makes a device node that device: its type and major:minor, the
// numbers the container runtime copies when it gives a container a host's node.
type deviceNumber struct {
	Type  string `json:"type"` // "char", "block", "missing" or "other"
	Major uint32 `json:"major,omitempty"`
	Minor uint32 `json:"minor,omitempty"`
	Error string `json:"error,omitempty"`
}

// statNodes stats each path without opening it (a device node needs no permission to
// be stat'ed, and the client pod has none to open it).
func statNodes(paths []string) map[string]deviceNumber {
	out := make(map[string]deviceNumber, len(paths))
	for _, path := range paths {
		out[path] = statNode(path)
	}
	return out
}

func statNode(path string) deviceNumber {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return deviceNumber{Type: "missing"}
		}
		return deviceNumber{Type: "other", Error: (&os.PathError{Op: "stat", Path: path, Err: err}).Error()}
	}
	kind := map[uint32]string{unix.S_IFCHR: "char", unix.S_IFBLK: "block"}[st.Mode&unix.S_IFMT]
	if kind == "" {
		return deviceNumber{Type: "other"}
	}
	return deviceNumber{Type: kind, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
}
