// Package notify carries a2redis wake-ups: a subscriber that survives
// reconnects, a watcher of sessions' notify channels, a watcher of the
// ready index's work channels, and a gap-free session feed. Its
// constructors take the store they serve (*redisstore.Store): the client,
// the key prefix, the ready index's shards and the publish mode
// (Config.ShardedPubSub) are the store's.
//
// A wake-up is published after a write commits, on the session's notify
// channel (keys.Session.NotifyChannel). It carries the new events when
// they fit (32 KB), so a caught-up feed applies them without reading the
// stream; otherwise it is bare and the feed catches up with XRANGE.
package notify
