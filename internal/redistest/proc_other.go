//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil outside Linux: servers are still stopped by Main
// and t.Cleanup, but there is no kernel safety net if the test binary is
// killed.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// Freeze skips the test outside Linux (it needs SIGSTOP).
func (in *Instance) Freeze() { in.t.Skip("redistest: Freeze needs SIGSTOP (Linux)") }

// Thaw does nothing outside Linux.
func (in *Instance) Thaw() {}
