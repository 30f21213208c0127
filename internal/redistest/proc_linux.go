//go:build linux

package redistest

import "syscall"

// sysProcAttr puts a spawned server in its own process group and asks the
// kernel to SIGKILL it when the test binary dies, so servers never outlive a
// killed test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
