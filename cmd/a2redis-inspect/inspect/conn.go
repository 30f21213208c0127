package inspect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// clientOption turns the --url values into rueidis options: one URL is a
// single server or a cluster seed (rueidis asks the server which), several
// are the seeds of a cluster and must agree on scheme, credentials and
// database. "?skip_verify=true" on a rediss:// URL turns certificate
// verification off.
func clientOption(urls []string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	for i, raw := range urls {
		o, err := parseURL(raw)
		if err != nil {
			return rueidis.ClientOption{}, err
		}
		if i == 0 {
			opt = o
			continue
		}
		if (o.TLSConfig == nil) != (opt.TLSConfig == nil) || o.Username != opt.Username || o.Password != opt.Password || o.SelectDB != opt.SelectDB ||
			(o.TLSConfig != nil && o.TLSConfig.InsecureSkipVerify != opt.TLSConfig.InsecureSkipVerify) {
			return rueidis.ClientOption{}, fmt.Errorf("--url %s: every URL of a cluster must use the same scheme, user, password, database and skip_verify as the first", redact(raw))
		}
		opt.InitAddress = append(opt.InitAddress, o.InitAddress...)
	}
	opt.DisableCache = true // no client-side caching: Upstash refuses CLIENT TRACKING, and a one-shot tool gains nothing
	opt.ClientName = name
	return opt, nil
}

// parseURL parses one --url: a redis:// or rediss:// URL, or a bare
// host:port (taken as redis://host:port).
func parseURL(raw string) (rueidis.ClientOption, error) {
	if !strings.Contains(raw, "://") {
		raw = "redis://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("--url %s: %v", redact(raw), unwrapURLError(err))
	}
	q := u.Query()
	skipVerify := false
	if q.Has("skip_verify") {
		v := q.Get("skip_verify")
		if v == "" {
			skipVerify = true
		} else if skipVerify, err = strconv.ParseBool(v); err != nil {
			return rueidis.ClientOption{}, fmt.Errorf("--url %s: skip_verify=%q is not true or false", redact(raw), v)
		}
		q.Del("skip_verify")
		u.RawQuery = q.Encode()
	}
	switch u.Scheme {
	case "redis", "rediss", "valkey", "valkeys":
	default:
		return rueidis.ClientOption{}, fmt.Errorf("--url %s: scheme %q: use redis:// or rediss:// (TLS)", redact(raw), u.Scheme)
	}
	opt, err := rueidis.ParseURL(u.String())
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("--url %s: %v", redact(raw), err)
	}
	if skipVerify {
		if opt.TLSConfig == nil {
			return rueidis.ClientOption{}, fmt.Errorf("--url %s: skip_verify needs a rediss:// (TLS) URL", redact(raw))
		}
		opt.TLSConfig.InsecureSkipVerify = true
	}
	return opt, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			if j := strings.Index(raw, "://"); j >= 0 && j < i {
				return raw[:j+3] + "***@" + raw[i+1:]
			}
		}
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// connect opens the client. rueidis dials while constructing it, so a
// wrong password or an unreachable server fails here.
func (a *app) connect() error {
	opt, err := clientOption(a.opts.urls.list())
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	opt.Dialer.Timeout = a.opts.timeout
	a.addrs = strings.Join(opt.InitAddress, ",")
	a.tls = opt.TLSConfig != nil
	a.seeds = len(opt.InitAddress)
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	a.client = client
	return nil
}

// errNoData: the prefix has no schema key.
type errNoData struct{ prefix string }

func (e *errNoData) Error() string {
	return fmt.Sprintf("no a2redis data under prefix %q (key %s does not exist): check --prefix or %s", e.prefix, keys.Schema(e.prefix), EnvPrefix)
}

// errNoSession: the session's log does not exist.
type errNoSession struct{ prefix, session string }

func (e *errNoSession) Error() string {
	return fmt.Sprintf("no session %s under prefix %q (its log key does not exist): list them with '%s sessions'", strconv.Quote(e.session), e.prefix, name)
}

// prepare connects and checks what cmd needs: the prefix's layout (read
// with GET, never claimed), then builds the store, then the session.
func (a *app) prepare(ctx context.Context, need need, args []string) error {
	if err := keys.ValidatePrefix(a.opts.prefix); err != nil {
		return usagef("--prefix %q: it must be non-empty and must not contain braces", a.opts.prefix)
	}
	if err := a.connect(); err != nil {
		return err
	}
	if need < needData {
		return nil
	}
	found, err := a.layout(ctx)
	if err != nil {
		return err
	}
	switch found {
	case "":
		return &errNoData{prefix: a.opts.prefix}
	case keys.Layout:
	default:
		return &a2redis.LayoutError{Prefix: a.opts.prefix, Found: found, Want: keys.Layout}
	}
	// The schema key holds our layout, so New's SET NX writes nothing; the
	// ready index's shard count is the one the prefix recorded (New's SET
	// NX of it then writes nothing either).
	shards, err := a.readyShards(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	store, err := redisstore.New(cctx, a.client, redisstore.Config{Prefix: a.opts.prefix, Clock: a.env.Now, ReadyShards: shards})
	if err != nil {
		return err
	}
	a.store = store
	if need < needSession || len(args) == 0 {
		// A command that names no session here (dead --all).
		return nil
	}
	return a.requireSession(ctx, args[0])
}

// readyShards returns the ready index's shard count recorded under the
// prefix, 0 (the default) when none is.
func (a *app) readyShards(ctx context.Context) (int, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	c := a.client
	n, err := c.Do(cctx, c.B().Get().Key(keys.ReadyShards(a.opts.prefix)).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return int(n), err
}

// layout returns the layout recorded under the prefix, "" when none.
func (a *app) layout(ctx context.Context) (string, error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	c := a.client
	found, err := c.Do(cctx, c.B().Get().Key(keys.Schema(a.opts.prefix)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return found, err
}

func (a *app) requireSession(ctx context.Context, session string) error {
	cctx, cancel := a.call(ctx)
	defer cancel()
	c := a.client
	n, err := c.Do(cctx, c.B().Exists().Key(keys.For(a.opts.prefix, session).Log()).Build()).AsInt64()
	if err != nil {
		return err
	}
	if n == 0 {
		return &errNoSession{prefix: a.opts.prefix, session: session}
	}
	return nil
}

// explain turns an error into one actionable line.
func (a *app) explain(err error) string {
	var (
		noData    *errNoData
		noSession *errNoSession
		layout    *a2redis.LayoutError
		opErr     *net.OpError
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
	)
	where := a.addrs
	switch {
	case errors.As(err, &noData):
		return noData.Error()
	case errors.As(err, &noSession):
		return noSession.Error()
	case errors.As(err, &layout):
		return fmt.Sprintf("prefix %q holds key layout %q, but this %s reads %q: use the %s of the a2redis release that wrote it, or check --prefix",
			layout.Prefix, layout.Found, name, layout.Want, name)
	case errors.Is(err, context.DeadlineExceeded):
		if a.tls {
			return fmt.Sprintf("Redis at %s did not answer within %v: check that it is up and speaks TLS on that port (else use redis://), or raise --timeout", where, a.opts.timeout)
		}
		return fmt.Sprintf("Redis at %s did not answer within %v: check that it is up and not overloaded, or raise --timeout", where, a.opts.timeout)
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		upper := strings.ToUpper(msg)
		switch {
		case strings.HasPrefix(upper, "WRONGPASS"):
			return fmt.Sprintf("authentication failed at %s: wrong user name or password (%s); check the user:password part of --url or %s", where, firstWord(msg), EnvURL)
		case strings.HasPrefix(upper, "NOAUTH"):
			return fmt.Sprintf("Redis at %s requires a password: put it in the URL, e.g. redis://:PASSWORD@%s or redis://USER:PASSWORD@%s", where, firstAddr(where), firstAddr(where))
		case strings.HasPrefix(upper, "NOPERM"):
			return fmt.Sprintf("the Redis user lacks a permission this command needs (%s): grant it read access to the prefix's keys (and EVAL/EVALSHA)", oneLine(msg))
		case strings.Contains(upper, "CLUSTER SUPPORT DISABLED") && a.seeds > 1:
			return fmt.Sprintf("--url names %d servers (%s), but they are not Redis Cluster nodes: give a single --url for a standalone server", a.seeds, where)
		case strings.HasPrefix(upper, "LOADING"):
			return fmt.Sprintf("Redis at %s is still loading its data set: try again in a moment", where)
		}
		return fmt.Sprintf("Redis at %s replied: %s", where, oneLine(msg))
	}
	switch {
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return fmt.Sprintf("TLS certificate of %s is not trusted (%v): fix the certificate, or add ?skip_verify=true to the rediss:// URL to skip verification (insecure)", where, rootCause(err))
	case errors.As(err, &record):
		return fmt.Sprintf("%s does not speak TLS: use redis:// instead of rediss://", where)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Sprintf("cannot reach Redis at %s: %v; check --url (or %s) and that the server is up", where, rootCause(err), EnvURL)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		hint := "is the server up?"
		if !a.tls {
			hint = "if it expects TLS, use rediss://"
		}
		return fmt.Sprintf("Redis at %s closed the connection (%v): %s", where, rootCause(err), hint)
	case errors.Is(err, a2redis.ErrRangeGap):
		return fmt.Sprintf("%v (a clear or reclaim may be running: try again)", err)
	}
	if a.tls && strings.Contains(err.Error(), "unknown message type") {
		return fmt.Sprintf("%s did not answer like Redis over TLS (%v): check the port, or use redis:// for a plain connection", where, err)
	}
	if !a.tls && strings.Contains(err.Error(), "unknown message type") {
		return fmt.Sprintf("%s did not answer like Redis (%v): check the host and port, or use rediss:// if it expects TLS", where, err)
	}
	return err.Error()
}

// rootCause unwraps to the innermost error for a short message.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i > 0 {
		return s[:i]
	}
	return s
}

func firstAddr(addrs string) string {
	if i := strings.IndexByte(addrs, ','); i > 0 {
		return addrs[:i]
	}
	return addrs
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
