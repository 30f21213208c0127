package worker

// SetRenewGate makes w call gate before each renewal round (a gate that
// blocks stalls renewal). Set it before Run.
func SetRenewGate(w *Worker, gate func()) { w.renewGate.Store(&gate) }

// Poke makes w read the ready index again, as a wake-up would (tests move
// the store's clock past a hold, which no wake-up announces).
func Poke(w *Worker) { w.poke() }

// SetBeatGate makes w call gate before each heartbeat; a false answer
// skips it (heartbeats that stop, as a killed process's do). Set it before
// Run.
func SetBeatGate(w *Worker, gate func() bool) { w.beatGate.Store(&gate) }

// Woken returns the sessions wake-ups named that w has not claimed from
// yet, in the order it will name them.
func Woken(w *Worker) []string { return w.inbox.queued() }
