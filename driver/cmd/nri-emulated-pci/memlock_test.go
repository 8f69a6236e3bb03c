package main

import (
	"errors"
	"testing"
)

const gib = 1 << 30

// Two launcher processes under a virtqemud (pid 20, uid 107) whose limit virt-handler
// (pid 10, every capability) raised: the kernel's rules, with CAP_SYS_RESOURCE.
func limits() *memlockLimits {
	procs := map[int]process{
		10: {pid: 10, ppid: 1, uid: 0, capEff: 0xff, pidNS: "host", start: 1},
		20: {pid: 20, ppid: 1, uid: 107, pidNS: "launcher", start: 2},
		21: {pid: 21, ppid: 20, uid: 107, pidNS: "launcher", start: 30},
		// daemonized by libvirt: its parent has gone, the container's init took it
		22: {pid: 22, ppid: 19, uid: 107, pidNS: "launcher", start: 40},
		19: {pid: 19, ppid: 1, uid: 107, pidNS: "launcher", start: 3},
		30: {pid: 30, ppid: 1, uid: 107, pidNS: "other", start: 50},
	}
	return &memlockLimits{
		set: map[int]record{}, allCaps: 0xff, now: func() uint64 { return 20 },
		proc: func(pid int) (process, error) {
			if p, ok := procs[pid]; ok {
				return p, nil
			}
			return process{}, errors.New("no such process")
		},
		real: func(int) (rlimit, error) { return rlimit{8 << 20, 8 << 20}, nil },
	}
}

func TestAPrivilegedCallerRaisesAnotherProcesssLimit(t *testing.T) {
	m := limits()
	handler, _ := m.proc(10)
	target, _ := m.proc(20)
	old, errno := m.setLimit(handler, target, rlimit{3 * gib, 3 * gib})
	if errno != 0 || old.max != 8<<20 {
		t.Fatalf("errno %d old %v: want the raise, reporting the real 8 MiB as old", errno, old)
	}
	// QEMU, forked by virtqemud afterwards, inherits it and may set up to it...
	qemu, _ := m.proc(21)
	if _, errno := m.setLimit(qemu, qemu, rlimit{3 * gib, 3 * gib}); errno != 0 {
		t.Fatalf("errno %d: setting the inherited limit must succeed", errno)
	}
	// ...but not above it, without the capability.
	if _, errno := m.setLimit(qemu, qemu, rlimit{4 * gib, 4 * gib}); errno != 1 {
		t.Fatalf("errno %d: want EPERM above the inherited hard limit", errno)
	}
	// A daemonized QEMU started after the raise inherited it too.
	daemonized, _ := m.proc(22)
	if _, errno := m.setLimit(daemonized, daemonized, rlimit{3 * gib, 3 * gib}); errno != 0 {
		t.Fatalf("errno %d: a process started in the namespace after the raise inherited it", errno)
	}
}

func TestAnUnprivilegedCallerCannotRaiseItsOwnLimitOrTouchOthers(t *testing.T) {
	m := limits()
	launcher, _ := m.proc(30)
	if _, errno := m.setLimit(launcher, launcher, rlimit{gib, gib}); errno != 1 {
		t.Fatalf("errno %d: want EPERM above the real 8 MiB", errno)
	}
	if _, errno := m.setLimit(launcher, launcher, rlimit{1 << 20, 1 << 20}); errno != 0 {
		t.Fatalf("errno %d: lowering is always allowed", errno)
	}
	handler, _ := m.proc(10)
	if _, errno := m.setLimit(launcher, handler, rlimit{1 << 20, 1 << 20}); errno != 1 {
		t.Fatalf("errno %d: want EPERM on another user's process", errno)
	}
	if _, errno := m.setLimit(handler, handler, rlimit{2 * gib, gib}); errno != 22 {
		t.Fatalf("errno %d: want EINVAL when the soft limit exceeds the hard", errno)
	}
}
