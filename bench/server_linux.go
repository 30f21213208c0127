//go:build linux

package bench

import "syscall"

// sysProcAttr puts the server in its own process group (Ctrl-C reaches only
// the harness) and has the kernel SIGKILL it if the harness dies without
// stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
