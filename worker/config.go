package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/schedule"
)

// Defaults of Config.
const (
	// DefaultConcurrency bounds the handlers in flight per process.
	DefaultConcurrency = 64
	// DefaultTTL is the lease of every claim; it is renewed while the
	// handler runs, so it bounds how long a crashed process's heads wait
	// before another process takes them over, not how long a handler may
	// run.
	DefaultTTL = 30 * time.Second
	// DefaultMaxFailures dead-letters a head at its fifth failure (lapsed
	// claims taken over count as failures too): the store's default.
	DefaultMaxFailures = redisstore.DefaultMaxFailures
	// DefaultStopTimeout is how long in-flight handlers may run on after a
	// stop begins before their contexts are cancelled.
	DefaultStopTimeout = 10 * time.Second
	// DefaultStopGrace is what the hard stop deadline adds to StopTimeout
	// by default: time for cancelled handlers to return and their claims
	// to be released.
	DefaultStopGrace = 5 * time.Second
	// DefaultMaxWait caps how long an idle worker waits before it reads
	// the ready index again without a wake-up: how late it notices the
	// work nothing announces, such as the claims of a process that died
	// (due TTL after its last renewal) or another process's retry holds.
	// An idle pass costs one command per index shard.
	DefaultMaxWait = 10 * time.Second
	// DefaultRepairEvery is how often the deployment repairs the ready
	// index (redisstore.Store.TryRepairReady: one worker per prefix and
	// interval runs the pass).
	DefaultRepairEvery = 30 * time.Second
	// DefaultRetentionEvery is how often the deployment runs a retention
	// pass when Config.Retention is set.
	DefaultRetentionEvery = time.Minute
	// DefaultCompleteLinger is how long completions of one session's heads
	// wait for that session's other running handlers, to go in one script
	// call.
	DefaultCompleteLinger = time.Millisecond
	// DefaultCompleteBatch is the most completions one script call carries.
	DefaultCompleteBatch = 128
	// DefaultHeartbeatTTL is how long a worker's record in the prefix's
	// worker registry lives without a heartbeat (one every TTL/3): a
	// process that dies without deregistering disappears from
	// a2redis-inspect workers within it.
	DefaultHeartbeatTTL = 15 * time.Second
)

// maxErrorText bounds the error text recorded on a failed head.
const maxErrorText = 4096

// Handler handles one head: a consumer's event. The events it returns are
// appended with the completion, atomically and fenced by the head's
// attempt (their Cause is set by the store). An error fails the attempt
// (see Permanent and Snooze); a panic is a failure recorded with its
// stack. ctx is cancelled when the claim is lost (cause ErrLeaseLost), the
// consumer's timeout passes, or a stop outruns Config.StopTimeout (cause
// ErrShutdown).
type Handler func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error)

// Middleware wraps a handler: logging, tracing, metrics. The first
// Config.Middleware is the outermost; a consumer's own (WithMiddleware)
// come inside the worker's.
type Middleware func(Handler) Handler

// Config configures a Worker. The zero value is ready to use.
type Config struct {
	// ID names this worker as the holder of its claims (shown by
	// a2redis-inspect). Default "<hostname>-<pid>-<6 random hex digits>";
	// every process needs its own.
	ID string
	// Concurrency bounds the handlers in flight in this worker; claims are
	// sized to the free slots. Default DefaultConcurrency (64).
	Concurrency int
	// TTL is the lease of every claim, renewed while handlers run.
	// Default DefaultTTL (30s).
	TTL time.Duration
	// RenewEvery is how often held claims are renewed (every claim older
	// than half of it, one RenewClaims call per session). Default TTL/3;
	// at most TTL/2.
	RenewEvery time.Duration
	// MaxFailures dead-letters a head once its failures reach it, for
	// every consumer of this worker whose registry entry sets no
	// a2redis.Consumer.MaxFailures (the entry's wins: one value for the
	// prefix). It also dead-letters, when claiming, a head whose lapsed
	// claims reached it (a lapse counts when its holder lost no other head
	// of the session). Default DefaultMaxFailures (5).
	MaxFailures int
	// Backoff is the retry policy of consumers that set none
	// (WithBackoff). Default DefaultBackoff.
	Backoff Backoff
	// StopTimeout is how long in-flight handlers may run on once a stop
	// begins (Run's ctx cancelled, or Shutdown); then their contexts are
	// cancelled (cause ErrShutdown) and their claims released without a
	// failure. Default DefaultStopTimeout (10s).
	StopTimeout time.Duration
	// StopDeadline bounds the whole stop, from its start: when it passes,
	// Run returns even if handlers ignore their cancelled contexts (their
	// claims then lapse; see ErrStopDeadline). Default StopTimeout +
	// DefaultStopGrace (5s); at least StopTimeout.
	StopDeadline time.Duration
	// MaxWait caps how long an idle worker waits for a wake-up before it
	// reads the ready index again. Wake-ups announce new work, and the
	// index tells when the holds it saw end, but nothing announces holds
	// set after its last read by other processes (a retry, or the lease
	// of a process that then died): MaxWait bounds how late those are
	// noticed. Default DefaultMaxWait (10s).
	MaxWait time.Duration
	// RepairEvery is how often the deployment repairs the ready index
	// (redisstore.Store.TryRepairReady; every worker tries, one per prefix
	// and interval runs the pass). Default DefaultRepairEvery (30s);
	// negative never repairs.
	RepairEvery time.Duration
	// Retention, when set, ends or drops the prefix's idle sessions, and
	// with its Trim trims the others' handled past (see
	// redisstore.RetentionPolicy): every RetentionEvery one worker of the
	// prefix runs a bounded pass (redisstore.Store.TryRetention), going
	// on from where the last pass stopped. Nil (the default) keeps every
	// session.
	Retention *redisstore.RetentionPolicy
	// RetentionEvery is how often the deployment runs a retention pass.
	// Default DefaultRetentionEvery (1 min).
	RetentionEvery time.Duration
	// CompleteLinger is how long a completion of a head that returned no
	// events waits for the session's other running handlers, so that they
	// complete in one script call. It never waits when none of the
	// session's handlers are still running. Default DefaultCompleteLinger
	// (1ms); negative never waits.
	CompleteLinger time.Duration
	// CompleteBatch is the most completions one script call carries.
	// Default DefaultCompleteBatch (128).
	CompleteBatch int
	// AllConsumers says that this worker has a handler for every consumer
	// with work on the prefix, for a store that declares no consumers:
	// its claims then name no consumers, which lets the store use its
	// fastest claim, and a head of a consumer it has no handler for fails
	// with ErrNoHandler (retried, then dead-lettered). Leave it off when
	// workers split the consumers between them: each then claims only its
	// own. Without it, and with no consumers declared, claims name the
	// handled consumers. Ignored when the store declares consumers (claims
	// then serve the declared ones a worker handles). Default false.
	AllConsumers bool
	// HeartbeatTTL is how long this worker's record in the prefix's
	// worker registry (redisstore.Store.Workers, a2redis-inspect workers:
	// id, host, pid, consumers, in-flight and held heads) lives; the
	// worker rewrites it every HeartbeatTTL/3 while it runs and removes it
	// when Run returns, so a process that dies disappears within
	// HeartbeatTTL. Default DefaultHeartbeatTTL (15s); at least 3ms.
	HeartbeatTTL time.Duration
	// Host is the host name the registry shows for this worker. Default
	// os.Hostname().
	Host string
	// Schedules are periodic producers this worker runs while it runs
	// (package schedule): each appends one event per tick to its session,
	// exactly once however many workers run the same schedule. Checked by
	// New (an invalid schedule is an ErrInvalidArgument). Default none.
	Schedules []schedule.Schedule
	// Middleware wraps every handler, the first outermost.
	Middleware []Middleware
	// Hooks are called at the worker's lifecycle points.
	Hooks Hooks
	// Logger receives the runtime's log: start and stop (Info), failures,
	// lost leases and superseded completions (Warn), dead letters and
	// store errors (Error). Default slog.Default().
	Logger *slog.Logger
	// ErrorHandler, when set, is called with every handler error (head
	// set) and every runtime error (head nil: a claim, renewal or write
	// that failed), besides the log.
	ErrorHandler func(ctx context.Context, head *a2redis.HeadEvent, err error)
}

// Hooks are called at a worker's lifecycle points; each may be nil. They
// run on the runtime's goroutines: keep them quick.
type Hooks struct {
	// OnStart is called once Run has started, before the first claim.
	OnStart func(ctx context.Context)
	// OnOutcome is called once a head's outcome is recorded (or known to
	// be lost), with the handler's context values (not its cancellation).
	OnOutcome func(ctx context.Context, o Outcome)
	// OnStop is called when Run is about to return, with its error.
	OnStop func(err error)
	// OnRetention is called after each retention pass this worker ran
	// (Config.Retention), with what it did.
	OnRetention func(ctx context.Context, r redisstore.RetentionResult)
}

// OutcomeKind tells what became of a claimed head.
type OutcomeKind string

// The outcome kinds.
const (
	// OutcomeCompleted: the handler succeeded and its completion (with its
	// returned events) was recorded.
	OutcomeCompleted OutcomeKind = "completed"
	// OutcomeFailed: the handler failed; the failure was counted and the head
	// runs again after RetryAfter.
	OutcomeFailed OutcomeKind = "failed"
	// OutcomeDeadLettered: the head was dead-lettered: a permanent error, its
	// failures reached MaxFailures, or (with no handler run) its claims
	// lapsed MaxFailures times.
	OutcomeDeadLettered OutcomeKind = "dead_lettered"
	// OutcomeSnoozed: the handler asked to run again after RetryAfter (Snooze);
	// no failure was counted.
	OutcomeSnoozed OutcomeKind = "snoozed"
	// OutcomeReleased: the worker stopped and gave the claim back without
	// counting a failure; the head runs again in any worker.
	OutcomeReleased OutcomeKind = "released"
	// OutcomeLeaseLost: the claim was lost while the handler ran (another holder
	// took the head over, or the lease ran out); nothing was recorded.
	OutcomeLeaseLost OutcomeKind = "lease_lost"
	// OutcomeSuperseded: the store refused the outcome because the attempt no
	// longer owned its head (a takeover the renewal had not reported yet);
	// nothing was recorded.
	OutcomeSuperseded OutcomeKind = "superseded"
	// OutcomeWriteFailed: recording the outcome failed (the store gave up after
	// its own retries, redisstore.Config.Retries: the worker retries
	// nothing itself); unless a try did commit, the lease lapses and the
	// head runs again.
	OutcomeWriteFailed OutcomeKind = "write_failed"
)

// Outcome is what became of one claimed head.
type Outcome struct {
	// Head is the head as claimed.
	Head a2redis.HeadEvent
	// Kind is what became of it.
	Kind OutcomeKind
	// Err is the handler's error (OutcomeFailed, OutcomeDeadLettered, OutcomeSnoozed, and
	// OutcomeReleased when it returned one), or the store's (OutcomeWriteFailed).
	Err error
	// Events are the returned events as stored (OutcomeCompleted).
	Events []a2redis.StoredEvent
	// Failures is the head's failure count after a OutcomeFailed or OutcomeDeadLettered.
	Failures int64
	// RetryAfter is the wait before the head runs again (OutcomeFailed, OutcomeSnoozed).
	RetryAfter time.Duration
	// Duration is how long the handler ran (zero when it never ran).
	Duration time.Duration
}

// HandlerSpec binds a handler to a consumer; pass it to New.
type HandlerSpec struct {
	consumer    string
	handler     Handler
	limit       int
	rate        redisstore.RateLimit
	backoff     Backoff
	timeout     time.Duration
	middlewares []Middleware
}

// Handle binds h to the consumer named consumer: every head of it (event,
// lane or typed log cursor alike) is handled by h. When the store declares
// consumers (redisstore.Config.Consumers) the name must be one of them,
// and a typed log consumer must be declared there.
func Handle(consumer string, h Handler, opts ...HandlerOption) HandlerSpec {
	s := HandlerSpec{consumer: consumer, handler: h}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// HandlerOption configures one consumer's handling.
type HandlerOption func(*HandlerSpec)

// MaxInFlight bounds this consumer's handlers in flight in this worker
// (within Config.Concurrency). Heads a claim returns beyond it wait in the
// process, holding their lease, until one of the consumer's handlers
// returns. Default: only Config.Concurrency bounds it.
func MaxInFlight(n int) HandlerOption { return func(s *HandlerSpec) { s.limit = n } }

// WithBackoff sets this consumer's retry policy (default Config.Backoff).
func WithBackoff(b Backoff) HandlerOption { return func(s *HandlerSpec) { s.backoff = b } }

// WithTimeout bounds each run of the handler: its context ends after d
// (the run then fails with the context's error, counted as a failure).
// Default: no bound.
func WithTimeout(d time.Duration) HandlerOption { return func(s *HandlerSpec) { s.timeout = d } }

// WithMiddleware wraps this consumer's handler, inside Config.Middleware.
func WithMiddleware(m ...Middleware) HandlerOption {
	return func(s *HandlerSpec) { s.middlewares = append(s.middlewares, m...) }
}

// withDefaults returns cfg with its defaults applied, or an
// ErrInvalidArgument.
func withDefaults(cfg Config) (Config, error) {
	if cfg.ID == "" {
		cfg.ID = defaultID()
	}
	if err := check.Name("Config.ID", cfg.ID); err != nil {
		return cfg, err
	}
	positive := func(field string, v int64) error {
		if v < 0 {
			return check.Invalid(field, "is negative (%d)", v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Config.Concurrency", int64(cfg.Concurrency)}, {"Config.TTL", int64(cfg.TTL)},
		{"Config.RenewEvery", int64(cfg.RenewEvery)}, {"Config.MaxFailures", int64(cfg.MaxFailures)},
		{"Config.StopTimeout", int64(cfg.StopTimeout)}, {"Config.StopDeadline", int64(cfg.StopDeadline)},
		{"Config.MaxWait", int64(cfg.MaxWait)}, {"Config.CompleteBatch", int64(cfg.CompleteBatch)},
		{"Config.HeartbeatTTL", int64(cfg.HeartbeatTTL)},
	} {
		if err := positive(f.name, f.v); err != nil {
			return cfg, err
		}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 3*time.Millisecond {
		return cfg, check.Invalid("Config.TTL", "must be at least 3ms (got %v)", cfg.TTL)
	}
	if cfg.RenewEvery == 0 {
		cfg.RenewEvery = cfg.TTL / 3
	}
	if cfg.RenewEvery > cfg.TTL/2 {
		return cfg, check.Invalid("Config.RenewEvery", "must be at most TTL/2 = %v (got %v): a lease must be renewed before it runs out", cfg.TTL/2, cfg.RenewEvery)
	}
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = DefaultMaxFailures
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.StopDeadline == 0 {
		cfg.StopDeadline = cfg.StopTimeout + DefaultStopGrace
	}
	if cfg.StopDeadline < cfg.StopTimeout {
		return cfg, check.Invalid("Config.StopDeadline", "is %v, below StopTimeout %v", cfg.StopDeadline, cfg.StopTimeout)
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.RetentionEvery < 0 {
		return cfg, check.Invalid("Config.RetentionEvery", "is negative (%v)", cfg.RetentionEvery)
	}
	if cfg.RetentionEvery == 0 {
		cfg.RetentionEvery = DefaultRetentionEvery
	}
	if cfg.Retention != nil {
		if _, err := cfg.Retention.Check(); err != nil {
			return cfg, fmt.Errorf("Config.Retention: %w", err)
		}
	}
	if cfg.RepairEvery == 0 {
		cfg.RepairEvery = DefaultRepairEvery
	}
	if cfg.CompleteLinger == 0 {
		cfg.CompleteLinger = DefaultCompleteLinger
	}
	if cfg.CompleteBatch == 0 {
		cfg.CompleteBatch = DefaultCompleteBatch
	}
	if cfg.HeartbeatTTL == 0 {
		cfg.HeartbeatTTL = DefaultHeartbeatTTL
	}
	if cfg.HeartbeatTTL < 3*time.Millisecond {
		return cfg, check.Invalid("Config.HeartbeatTTL", "must be at least 3ms (got %v)", cfg.HeartbeatTTL)
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
