// The pod sandbox's process (what the "pause" image runs): it holds the pod's namespaces,
// reaps the orphans a shared PID namespace hands it, and exits on SIGTERM or SIGINT.
// Built static and packed into a local image by e2e/node.py; no registry involved.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
