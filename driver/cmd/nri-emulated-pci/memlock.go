package main

// EMULATED: raising RLIMIT_MEMLOCK. It needs CAP_SYS_RESOURCE, which this host's
// capability bounding set lacks, so no process here may raise the locked-memory limit
// above 8 MiB; VFIO needs it raised (virt-handler raises it for the launcher's
// virtqemud, libvirt sets it for QEMU). In containers that hold a VFIO group, calls
// that set RLIMIT_MEMLOCK are sent to this seccomp agent (OCI listenerPath), which
// answers them as the kernel of a host with that capability would, against limits it
// keeps per process: a caller holding every capability this host grants counts as
// holding CAP_SYS_RESOURCE; any other caller may only lower its own hard limit or keep
// it. The real limit is left as it is (QEMU's NVMe controller, given in place of the
// function, locks no guest memory).

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	rlimitMemlock = 8
	// memlockSocket is where runc hands the agent each container's seccomp listener.
	memlockSocket = "/run/kdc-emulated-pci/memlock.sock"
	sysSetrlimit  = 160 // x86_64
	sysPrlimit64  = 302
)

// rlimit is a soft and hard limit pair, as struct rlimit64.
type rlimit struct{ cur, max uint64 }

// process is what the agent knows of a process from /proc.
type process struct {
	pid, ppid int
	uid       int    // real uid
	capEff    uint64 // effective capabilities
	nsPid     int    // the pid in its own namespace
	pidNS     string // its pid namespace
	start     uint64 // start time, in clock ticks since boot
}

// record is an EMULATED limit of a process and when it was set.
type record struct {
	limit rlimit
	pidNS string
	at    uint64 // clock ticks since boot
}

// memlockLimits are the EMULATED RLIMIT_MEMLOCK values set through the agent, by pid.
type memlockLimits struct {
	mu      sync.Mutex
	set     map[int]record
	proc    func(pid int) (process, error)
	real    func(pid int) (rlimit, error)
	now     func() uint64 // clock ticks since boot
	allCaps uint64        // the host's capability bounding set
}

// limit is the process's emulated limit, which it inherited at fork: its own; else
// its nearest living ancestor's; else, as the agent cannot see a fork whose parent has
// gone (libvirt daemonizes QEMU), the latest one set in its pid namespace before it
// started; else the real one.
func (m *memlockLimits) limit(target process) (rlimit, error) {
	for p := target; ; {
		if r, ok := m.set[p.pid]; ok {
			return r.limit, nil
		}
		parent, err := m.proc(p.ppid)
		if p.ppid <= 1 || err != nil || parent.pidNS != target.pidNS {
			break
		}
		p = parent
	}
	var inherited *record
	for _, r := range m.set {
		if r.pidNS == target.pidNS && r.at <= target.start && (inherited == nil || r.at > inherited.at) {
			inherited = &r
		}
	}
	if inherited != nil {
		return inherited.limit, nil
	}
	return m.real(target.pid)
}

// setLimit answers caller's request to set target's RLIMIT_MEMLOCK to want, as
// kernel/sys.c do_prlimit and check_prlimit_permission do; it returns the old limit
// and 0, or an errno.
func (m *memlockLimits) setLimit(caller, target process, want rlimit) (rlimit, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	privileged := caller.capEff&m.allCaps == m.allCaps
	if caller.pid != target.pid && caller.uid != target.uid && !privileged {
		return rlimit{}, int(unix.EPERM)
	}
	if want.cur > want.max {
		return rlimit{}, int(unix.EINVAL)
	}
	old, err := m.limit(target)
	if err != nil {
		return rlimit{}, int(unix.ESRCH)
	}
	if want.max > old.max && !privileged {
		return rlimit{}, int(unix.EPERM)
	}
	m.set[target.pid] = record{want, target.pidNS, m.now()}
	return old, 0
}

// forget drops what the agent keeps of a process that has exited.
func (m *memlockLimits) forget(alive func(pid int) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid := range m.set {
		if !alive(pid) {
			delete(m.set, pid)
		}
	}
}

// procStatus reads a process's parent, uid, effective capabilities, namespaced pid,
// pid namespace and start time.
func procStatus(pid int) (process, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return process{}, err
	}
	defer f.Close()
	info := process{pid: pid}
	info.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command (which may hold spaces); starttime is field 22.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			if fields := strings.Fields(string(stat[i+1:])); len(fields) > 19 {
				info.start, _ = strconv.ParseUint(fields[19], 10, 64)
			}
		}
	}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		key, value, _ := strings.Cut(scanner.Text(), ":")
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "PPid":
			info.ppid, _ = strconv.Atoi(fields[0])
		case "Uid":
			info.uid, _ = strconv.Atoi(fields[0])
		case "CapEff":
			info.capEff, _ = strconv.ParseUint(fields[0], 16, 64)
		case "NSpid":
			info.nsPid, _ = strconv.Atoi(fields[len(fields)-1])
		}
	}
	return info, scanner.Err()
}

// ticksSinceBoot is now on the clock of /proc/<pid>/stat's start times (USER_HZ 100).
func ticksSinceBoot() uint64 {
	b, _ := os.ReadFile("/proc/uptime")
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0
	}
	seconds, _ := strconv.ParseFloat(fields[0], 64)
	return uint64(seconds * 100)
}

// realMemlock reads a process's limit from /proc/<pid>/limits (readable by all, where
// prlimit would need the capability this host lacks).
func realMemlock(pid int) (rlimit, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return rlimit{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "Max locked memory") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, "Max locked memory"))
		if len(fields) < 2 {
			break
		}
		return rlimit{parseLimit(fields[0]), parseLimit(fields[1])}, nil
	}
	return rlimit{}, fmt.Errorf("no locked-memory limit in /proc/%d/limits", pid)
}

func parseLimit(s string) uint64 {
	if s == "unlimited" {
		return ^uint64(0)
	}
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// hostCapabilities is this process's bounding set: every capability the host grants.
func hostCapabilities() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			caps, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps
		}
	}
	return ^uint64(0)
}

func encodeRlimit(l rlimit) []byte {
	out := make([]byte, 16)
	binary.LittleEndian.PutUint64(out, l.cur)
	binary.LittleEndian.PutUint64(out[8:], l.max)
	return out
}

func decodeRlimit(b []byte) rlimit {
	return rlimit{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
}
