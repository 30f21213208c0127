//go:build linux

package redistest

import "syscall"

// sysProcAttr puts a spawned server in its own process group and asks the
// kernel to SIGKILL it when the test binary dies, so servers never outlive a
// killed test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Freeze stops the server's process (SIGSTOP) until [Instance.Thaw]: it
// answers nothing, and as a replica it acknowledges nothing, while its
// connections stay open. It is thawed at t.Cleanup at the latest.
func (in *Instance) Freeze() {
	in.t.Helper()
	in.signal(syscall.SIGSTOP)
	in.t.Cleanup(in.Thaw)
}

// Thaw lets a frozen server run again (SIGCONT); on a running one it does
// nothing.
func (in *Instance) Thaw() { in.signal(syscall.SIGCONT) }

func (in *Instance) signal(sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc == nil || in.proc.exited() {
		return
	}
	if err := in.proc.cmd.Process.Signal(sig); err != nil {
		in.t.Errorf("redistest: %v to redis-server on %s: %v", sig, in.Addr(), err)
	}
}
