package sysfs

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kubevirt-dra-conformance/driver/emulation/kerneltree"
)

// Kernel is the EMULATED kernel side of driver binding and hot removal: it reacts to
// writes to driver_override, drivers/<drv>/unbind, drivers/<drv>/bind, drivers_probe,
// a device's remove and the bus's rescan as Linux does
// (Documentation/ABI/testing/sysfs-bus-pci), and shows the result as the kernel
// recording shows each driver state.
type Kernel struct {
	Root string // the machine root Build made: Root/sys, Root/dev
}

var knownDrivers = []string{boundNVMe, boundVFIO}

func (k Kernel) sys(parts ...string) string {
	return filepath.Join(append([]string{k.Root, SysDir}, parts...)...)
}

// takeRequest reads a write-only attribute and clears it, returning what was written.
func takeRequest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return ""
	}
	_ = os.WriteFile(path, nil, 0o200)
	return strings.TrimSpace(string(b))
}

func (m *machine) function(bdf string) *function {
	for _, fn := range m.Functions {
		if fn.BDF() == bdf && fn.Present {
			return fn
		}
	}
	return nil
}

// matches says whether the driver may take the function: driver_override names the
// one driver that may; without it, nvme matches the class and vfio-pci (no ID table
// of its own) matches nothing.
func matches(fn *function, driver string) bool {
	if fn.Override != "" {
		return fn.Override == driver
	}
	return driver == boundNVMe
}

// Step handles every pending write once, in the order the kernel would have: a writer
// sets driver_override and unbinds before it probes, so a probe seen here is applied
// after the unbinds that preceded it (the kernel handles each write synchronously; this
// stand-in wakes on it).
func (k Kernel) Step() error {
	m, err := loadMachine(k.Root)
	if err != nil {
		return err
	}
	t, err := LoadTemplate()
	if err != nil {
		return err
	}
	before := m.render(t)
	k.readOverrides(m)
	probe := takeRequest(k.sys("bus/pci/drivers_probe"))
	for _, drv := range knownDrivers {
		if fn := m.function(takeRequest(k.sys("bus/pci/drivers", drv, "unbind"))); fn != nil && fn.Driver == drv {
			m.bind(fn, unbound)
		}
		if fn := m.function(takeRequest(k.sys("bus/pci/drivers", drv, "bind"))); fn != nil && fn.Driver == unbound && matches(fn, drv) {
			m.bind(fn, drv)
		}
	}
	for _, fn := range m.Functions {
		if fn.Present && takeRequest(k.sys("bus/pci/devices", fn.BDF(), "remove")) == "1" {
			// The driver lets go first; a new pci_dev, found by a rescan, has no override.
			m.bind(fn, unbound)
			fn.Present, fn.Override = false, ""
		}
	}
	if takeRequest(k.sys("bus/pci/rescan")) == "1" {
		for _, fn := range m.Functions {
			if !fn.Present {
				fn.Present = true
				m.bind(fn, boundNVMe) // probed by its native driver
			}
		}
	}
	if fn := m.function(probe); fn != nil && fn.Driver == unbound {
		for _, drv := range knownDrivers {
			if matches(fn, drv) {
				m.bind(fn, drv)
				break
			}
		}
	}
	change := kerneltree.Diff(before, m.render(t))
	for p := range change.Changed {
		// The writer's own: a plain file cannot show the kernel's form of what was
		// written ("(null)\n" for "\n") without racing the writer's next write.
		if filepath.Base(p) == "driver_override" {
			delete(change.Changed, p)
		}
	}
	if err := apply(k.Root, change); err != nil {
		return err
	}
	return m.save(k.Root)
}

// readOverrides takes what was written to each driver_override: "\n" clears it.
func (k Kernel) readOverrides(m *machine) {
	for _, fn := range m.Functions {
		if !fn.Present {
			continue
		}
		b, err := os.ReadFile(k.sys("bus/pci/devices", fn.BDF(), "driver_override"))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "(null)" {
			v = ""
		}
		fn.Override = v
	}
}

// apply makes the trees under root show change: removals deepest first, then new
// folders, each made aside whole and renamed into place, then the other additions and
// changes parents first, a function's driver link last. A writer waiting for the link
// (as one waits for the kernel's uevent) then finds the binding complete, and no writer
// finds a folder half made (and its write overwritten).
func apply(root string, change kerneltree.Change) error {
	removed := append([]string(nil), change.Removed...)
	byDepth(removed, true)
	for _, p := range removed {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return fmt.Errorf("EMULATION: removing %s: %w", p, err)
		}
	}
	written := kerneltree.Snapshot{}
	for p, e := range change.Added {
		written[p] = e
	}
	for p, e := range change.Changed {
		written[p] = e
	}
	paths := make([]string, 0, len(written))
	for p := range written {
		paths = append(paths, p)
	}
	byDepth(paths, false)
	staging := filepath.Join(root, ".staging")
	made := map[string]string{} // a new folder's path -> where it is made
	var tops, rest []string     // new folders whose parent is not new; entries elsewhere
	for _, p := range paths {
		e := written[p]
		_, added := change.Added[p]
		parent, inNew := made[filepath.Dir(p)]
		switch {
		case inNew:
			made[p] = filepath.Join(parent, filepath.Base(p))
		case added && e.Kind == "dir":
			made[p] = filepath.Join(staging, strconv.Itoa(len(tops)))
			tops = append(tops, p)
		default:
			rest = append(rest, p)
			continue
		}
		if err := create(made[p], e); err != nil {
			return fmt.Errorf("EMULATION: %s: %w", p, err)
		}
	}
	for _, p := range tops {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			return err
		}
		if err := os.Rename(made[p], filepath.Join(root, p)); err != nil {
			return fmt.Errorf("EMULATION: %s: %w", p, err)
		}
	}
	sort.SliceStable(rest, func(i, j int) bool {
		return filepath.Base(rest[i]) != "driver" && filepath.Base(rest[j]) == "driver"
	})
	for _, p := range rest {
		if err := create(filepath.Join(root, p), written[p]); err != nil {
			return fmt.Errorf("EMULATION: %s: %w", p, err)
		}
	}
	return os.RemoveAll(staging)
}

// create makes one entry as the kernel shows it.
func create(path string, e kerneltree.Entry) error {
	mode, err := strconv.ParseUint(e.Mode, 8, 32)
	if err != nil {
		return fmt.Errorf("mode %q: %w", e.Mode, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if e.Kind != "dir" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	switch e.Kind {
	case "dir":
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
	case "link":
		return os.Symlink(e.Target, path)
	case "char", "block":
		var major, minor uint32
		if _, err := fmt.Sscanf(e.Device, "%d:%d", &major, &minor); err != nil {
			return fmt.Errorf("device %q: %w", e.Device, err)
		}
		kind := uint32(unix.S_IFCHR)
		if e.Kind == "block" {
			kind = unix.S_IFBLK
		}
		if err := unix.Mknod(path, kind|uint32(mode), int(unix.Mkdev(major, minor))); err != nil {
			return fmt.Errorf("making the device node (EMULATION needs root, CAP_MKNOD): %w", err)
		}
	default:
		content := []byte(e.Value)
		if encoded, ok := strings.CutPrefix(e.Value, "hex:"); ok {
			if content, err = hex.DecodeString(encoded); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return err
		}
	}
	return os.Chmod(path, os.FileMode(mode)) // past the umask
}

// requestFolders hold every attribute a writer may write a request to: the bus's
// drivers_probe and rescan, each driver's bind and unbind, each function's remove and
// driver_override.
func (k Kernel) requestFolders() []string {
	folders := []string{k.sys("bus/pci")}
	for _, drv := range knownDrivers {
		folders = append(folders, k.sys("bus/pci/drivers", drv))
	}
	functions, _ := filepath.Glob(k.sys("devices/pci0000:00/*"))
	return append(folders, functions...)
}

// Run handles each write as it lands, until ctx ends. The kernel acts on a write before
// write(2) returns; inotify wakes this stand-in on every change in the request folders
// instead of it polling the tree, which under TCG took a good share of a node's CPU.
// Its own writes wake it once more, to a step that finds nothing pending.
func (k Kernel) Run(ctx context.Context) error {
	w, err := newWaker()
	if err != nil {
		return err
	}
	defer w.close()
	stop := context.AfterFunc(ctx, w.wake)
	defer stop()
	for ctx.Err() == nil {
		// Watched first: a write after the watch wakes the next wait, one before it is
		// seen by this step. Each folder is watched anew every round: a function's
		// folder made anew by a rescan is a new inode, which the kernel watches apart.
		for _, folder := range k.requestFolders() {
			if err := w.watch(folder); err != nil {
				return err
			}
		}
		if err := k.Step(); err != nil {
			return err
		}
		if err := w.wait(); err != nil {
			return err
		}
	}
	return nil
}

// waker is an inotify instance read only to be woken: which file changed does not
// matter, since a step looks at every request. Its own pipe wakes it to stop.
type waker struct {
	inotify int
	pipe    [2]int
}

func newWaker() (*waker, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("EMULATION: inotify: %w", err)
	}
	w := &waker{inotify: fd}
	if err := unix.Pipe2(w.pipe[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("EMULATION: pipe: %w", err)
	}
	return w, nil
}

// watch watches a folder for writes to its files and for files made or removed in it;
// watching one already watched changes nothing, and a folder gone needs no watch.
func (w *waker) watch(folder string) error {
	_, err := unix.InotifyAddWatch(w.inotify, folder,
		unix.IN_CLOSE_WRITE|unix.IN_MODIFY|unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("EMULATION: watching %s: %w", folder, err)
	}
	return nil
}

// wait blocks until a watched folder changes (or wake is called), then drains what
// is queued: one step handles all of it.
func (w *waker) wait() error {
	fds := []unix.PollFd{{Fd: int32(w.inotify), Events: unix.POLLIN}, {Fd: int32(w.pipe[0]), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("EMULATION: waiting for writes: %w", err)
		}
		break
	}
	buf := make([]byte, 64<<10)
	for _, fd := range []int{w.inotify, w.pipe[0]} {
		for {
			if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
				break
			}
		}
	}
	return nil
}

func (w *waker) wake() { _, _ = unix.Write(w.pipe[1], []byte{1}) }

func (w *waker) close() {
	for _, fd := range []int{w.inotify, w.pipe[0], w.pipe[1]} {
		_ = unix.Close(fd)
	}
}
