// Command pause holds a pod's namespaces open, as the upstream pause image does; ours is
// built locally so the hermetic cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go reap()
	<-signals
}

// reap collects zombie children: pause is PID 1 of the pod's PID namespace when shared.
func reap() {
	children := make(chan os.Signal, 8)
	signal.Notify(children, syscall.SIGCHLD)
	for range children {
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
