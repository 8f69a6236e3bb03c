package main

import (
	"encoding/binary"
	"errors"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp user-notification interface (linux/seccomp.h): struct seccomp_notif is
// 80 bytes, struct seccomp_notif_resp 24.
const (
	notifRecv    = 0xc0502100 // SECCOMP_IOCTL_NOTIF_RECV
	notifSend    = 0xc0182101 // SECCOMP_IOCTL_NOTIF_SEND
	notifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID
	flagContinue = 1          // SECCOMP_USER_NOTIF_FLAG_CONTINUE
)

// notification is the part of struct seccomp_notif the agent reads.
type notification struct {
	id   uint64
	pid  int
	nr   int32
	args [6]uint64
}

// serveMemlock accepts each container's seccomp listener from runc and answers its
// notifications until the container goes.
func serveMemlock(limits *memlockLimits) error {
	if err := os.MkdirAll(filepath.Dir(memlockSocket), 0o700); err != nil {
		return err
	}
	_ = os.Remove(memlockSocket)
	listener, err := net.ListenUnix("unix", &net.UnixAddr{Name: memlockSocket, Net: "unix"})
	if err != nil {
		return err
	}
	go func() {
		for {
			conn, err := listener.AcceptUnix()
			if err != nil {
				log.Printf("EMULATED memlock: accept: %v", err)
				return
			}
			fd, err := receiveListener(conn)
			if err != nil {
				log.Printf("EMULATED memlock: no seccomp listener from runc: %v", err)
				continue
			}
			go limits.serve(fd)
		}
	}()
	return nil
}

// receiveListener reads runc's message (the container's state, and its seccomp
// listener as the one file descriptor passed) and closes the connection.
func receiveListener(conn *net.UnixConn) (int, error) {
	defer conn.Close()
	buf, oob := make([]byte, 1<<16), make([]byte, unix.CmsgSpace(4*8))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, err
	}
	messages, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	for _, message := range messages {
		if fds, err := unix.ParseUnixRights(&message); err == nil && len(fds) > 0 {
			for _, extra := range fds[1:] {
				_ = unix.Close(extra)
			}
			return fds[0], nil
		}
	}
	return -1, errors.New("the message carries no file descriptor")
}

// awaitNotification blocks until a notification is pending on the listener; false once
// no process uses the filter any more. NOTIF_RECV alone cannot tell: on a filter
// without users it returns ENOENT at once, every time.
func awaitNotification(fd int) bool {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return false
		}
		return fds[0].Revents&unix.POLLIN != 0 // else POLLHUP: the filter has no users
	}
}

func ioctl(fd int, request uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), request, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

func (m *memlockLimits) serve(fd int) {
	defer unix.Close(fd)
	for {
		if !awaitNotification(fd) {
			return // the container has gone
		}
		raw := make([]byte, 80)
		if err := ioctl(fd, notifRecv, unsafe.Pointer(&raw[0])); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue // the caller was interrupted or killed meanwhile
			}
			return
		}
		n := notification{
			id:  binary.LittleEndian.Uint64(raw),
			pid: int(binary.LittleEndian.Uint32(raw[8:])),
			nr:  int32(binary.LittleEndian.Uint32(raw[16:])),
		}
		for i := range n.args {
			n.args[i] = binary.LittleEndian.Uint64(raw[32+8*i:])
		}
		errno, flags := m.answer(fd, n)
		resp := make([]byte, 24)
		binary.LittleEndian.PutUint64(resp, n.id)
		binary.LittleEndian.PutUint32(resp[16:], uint32(-int32(errno)))
		binary.LittleEndian.PutUint32(resp[20:], flags)
		_ = ioctl(fd, notifSend, unsafe.Pointer(&resp[0]))
	}
}

// answer handles one call; it returns the errno (0 for success) and the response
// flags (continue: let the kernel run the call as it is).
func (m *memlockLimits) answer(fd int, n notification) (int, uint32) {
	m.forget(func(pid int) bool { _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); return err == nil })
	var targetArg int
	var resource, newAt, oldAt uint64
	switch n.nr {
	case sysPrlimit64: // prlimit64(pid, resource, new, old)
		targetArg, resource, newAt, oldAt = int(int32(n.args[0])), n.args[1], n.args[2], n.args[3]
	case sysSetrlimit: // setrlimit(resource, new): the caller itself
		resource, newAt = n.args[0], n.args[1]
	default:
		return 0, flagContinue
	}
	if resource != rlimitMemlock || newAt == 0 {
		return 0, flagContinue
	}
	caller, err := m.proc(n.pid)
	if err != nil {
		return int(unix.ESRCH), 0
	}
	target := caller
	if targetArg != 0 && targetArg != caller.nsPid {
		if caller.nsPid != caller.pid {
			return 0, flagContinue // another process of a nested pid namespace
		}
		if target, err = m.proc(targetArg); err != nil {
			return int(unix.ESRCH), 0
		}
	}
	mem, err := os.OpenFile(filepath.Join("/proc", strconv.Itoa(n.pid), "mem"), os.O_RDWR, 0)
	if err != nil {
		return int(unix.ESRCH), 0
	}
	defer mem.Close()
	raw := make([]byte, 16)
	if _, err := mem.ReadAt(raw, int64(newAt)); err != nil {
		return int(unix.EFAULT), 0
	}
	id := n.id
	if ioctl(fd, notifIDValid, unsafe.Pointer(&id)) != nil {
		return int(unix.ESRCH), 0 // the caller went away meanwhile
	}
	want := decodeRlimit(raw)
	old, errno := m.setLimit(caller, target, want)
	log.Printf("EMULATED memlock: pid %d set pid %d's RLIMIT_MEMLOCK to %d/%d: errno %d", caller.pid, target.pid, want.cur, want.max, errno)
	if errno == 0 && oldAt != 0 {
		if _, err := mem.WriteAt(encodeRlimit(old), int64(oldAt)); err != nil {
			return int(unix.EFAULT), 0
		}
	}
	return errno, 0
}
