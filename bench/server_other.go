//go:build unix && !linux

package bench

import "syscall"

// sysProcAttr puts the server in its own process group, so a terminal's
// Ctrl-C reaches only the harness.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
