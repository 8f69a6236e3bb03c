package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// A seccomp listener polls like a pipe's read end: POLLIN while a notification is
// pending, POLLHUP once no process uses the filter. The agent must stop on the latter
// (NOTIF_RECV would return ENOENT at once, forever).
func TestTheAgentWaitsForNotificationsAndStopsWhenNoProcessIsLeft(t *testing.T) {
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	if _, err := unix.Write(p[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	if !awaitNotification(p[0]) {
		t.Fatal("a pending notification was not seen")
	}
	if _, err := unix.Read(p[0], make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[1])
	if awaitNotification(p[0]) {
		t.Fatal("a listener without users was taken for a pending notification")
	}
}
