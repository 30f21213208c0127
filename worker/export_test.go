package worker

import "github.com/a2redis/a2redis/notify"

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

// SubscribedShards returns how many index shards' work channels w has
// subscribed to so far (each reports a gap once subscribed): once it
// equals the store's ReadyShards, no wake-up is missed for want of a
// subscription.
func SubscribedShards(w *Worker) int { return w.inbox.gaps() }

// Wake hands w a wake-up naming session, as its watch does for a work
// announcement.
func Wake(w *Worker, session string) { w.inbox.add(notify.WorkNotice{Session: session}) }

// Parked reports whether w's start-up is over — its first heartbeat and
// repair pass tried, every index shard's subscription reported — and its
// dispatcher waits for a wake-up or MaxWait with nothing left to read and
// no wake-up pending: an idle worker sends nothing until one comes.
func Parked(w *Worker) bool {
	return w.beats.Load() > 0 && (w.cfg.RepairEvery <= 0 || w.repairs.Load() > 0) &&
		w.inbox.gaps() == w.store.ReadyShards() && w.parked.Load() && !w.inbox.pending()
}
