//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil outside Linux: servers are still stopped by Main
// and t.Cleanup, but there is no kernel safety net if the test binary is
// killed.
func sysProcAttr() *syscall.SysProcAttr { return nil }
