// Command pause is the sandbox container of the dev node's pods (containerd's `sandbox_image`): it
// holds the pod's namespaces open and does nothing else. As the pod's PID 1 it reaps orphaned
// children, and it exits 0 on SIGINT or SIGTERM. Built locally (never pulled) by
// orchestrator/devenv/images.py into a one-file image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren collects every child that has exited, so none stays a zombie.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
