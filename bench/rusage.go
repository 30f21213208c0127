//go:build unix

package bench

import "syscall"

// processCPU returns this process's CPU time (user + system), in
// microseconds; the spawned redis-server, a child, is not included.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}
