package keylockproxy_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/keylockproxy"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func start(t *testing.T, requireFlag bool, resp2 bool) (*keylockproxy.Proxy, rueidis.Client) {
	t.Helper()
	p, err := keylockproxy.Start(keylockproxy.Options{Backend: redistest.ServerAddr(t), RequireFlag: requireFlag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, ForceSingleClient: true, DisableCache: true, AlwaysRESP2: resp2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return p, c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

const flag = scripts.KeyLockingShebang + "\n"

func TestFlaggedScriptsStayInTheirHashTag(t *testing.T) {
	for _, resp2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("resp2=%v", resp2), func(t *testing.T) {
			p, c := start(t, true, resp2)
			ctx := ctx(t)
			tag := redistest.Prefix(t)
			k1, k2, other := "p:{"+tag+"}:a", "p:{"+tag+"}:b", "p:{"+tag+"x}:a"
			eval := func(script string, keys ...string) (string, error) {
				return c.Do(ctx, c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Build()).ToString()
			}
			got, err := eval(flag+"redis.call('SET', KEYS[1], 'v') redis.call('MSET', '"+k2+"', 'w') return redis.call('GET', '"+k2+"')", k1)
			if err != nil || got != "w" {
				t.Fatalf("a flagged script within its tag: %q, %v", got, err)
			}
			for name, script := range map[string]string{
				"GET another tag":   flag + "return redis.call('GET', '" + other + "')",
				"MSET second key":   flag + "return redis.call('MSET', KEYS[1], 1, '" + other + "', 2)",
				"DEL second key":    flag + "return redis.call('DEL', KEYS[1], '" + other + "')",
				"pcall another tag": flag + "return redis.pcall('GET', '" + other + "')",
				"unknown command":   flag + "return redis.call('KEYS', '*')",
			} {
				if _, err := eval(script, k1); err == nil || !strings.Contains(err.Error(), "KEYLOCK") {
					t.Errorf("%s: want a KEYLOCK refusal, got %v", name, err)
				}
			}
			if _, err := eval(flag+"return 1", k1, other); err == nil || !strings.Contains(err.Error(), "KEYLOCK") {
				t.Errorf("declared keys of two tags: want a refusal, got %v", err)
			}
			if _, err := eval("return 1", k1); err == nil || !strings.Contains(err.Error(), "KEYLOCK") {
				t.Errorf("an unflagged script with RequireFlag: want a refusal, got %v", err)
			}
			if _, err := eval(scripts.ReadOnlyKeyLockingShebang+"\nreturn redis.call('SET', KEYS[1], 1)", k1); err == nil {
				t.Errorf("a no-writes script that writes: want the server's refusal")
			}
			if got, err := eval(scripts.ReadOnlyKeyLockingShebang+"\nreturn redis.call('GET', KEYS[1])", k1); err != nil || got != "v" {
				t.Errorf("a no-writes script that reads: %q, %v", got, err)
			}
			if s := p.Stats(); s.Flagged < 8 || s.Refused < 2 {
				t.Errorf("stats %+v", s)
			}
			// Other commands pass verbatim.
			if err := c.Do(ctx, c.B().Set().Key(other).Value("x").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEvalshaMapsToTheRewrittenScript(t *testing.T) {
	p, c := start(t, true, false)
	ctx := ctx(t)
	key := "p:{" + redistest.Prefix(t) + "}:n"
	script := rueidis.NewLuaScript(flag + "return redis.call('INCR', KEYS[1])")
	for i := 1; i <= 3; i++ {
		n, err := script.Exec(ctx, c, []string{key}, nil).AsInt64()
		if err != nil || n != int64(i) {
			t.Fatalf("run %d: %d, %v", i, n, err)
		}
	}
	if s := p.Stats(); s.Mapped < 2 {
		t.Fatalf("EVALSHA was not mapped after the first EVAL: %+v", s)
	}
	// SCRIPT LOAD answers the SHA1 of the text sent, and EVALSHA of it runs.
	text := flag + "return redis.call('GET', KEYS[1])"
	sha, err := c.Do(ctx, c.B().ScriptLoad().Script(text).Build()).ToString()
	sum := sha1.Sum([]byte(text))
	if err != nil || sha != hex.EncodeToString(sum[:]) {
		t.Fatalf("SCRIPT LOAD: %q, %v", sha, err)
	}
	got, err := c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Build()).ToString()
	if err != nil || got != "3" {
		t.Fatalf("EVALSHA of the loaded sha: %q, %v", got, err)
	}
	// An unknown sha is NOSCRIPT.
	err = c.Do(ctx, c.B().Evalsha().Sha1(strings.Repeat("0", 40)).Numkeys(1).Key(key).Build()).Error()
	if err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		t.Fatalf("unknown sha: %v", err)
	}
}

func TestPipelinedRefusalsKeepTheirPlace(t *testing.T) {
	_, c := start(t, true, false)
	ctx := ctx(t)
	tag := redistest.Prefix(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("p:{%s}:%d", tag, i)
			if i%2 == 0 {
				got, err := c.Do(ctx, c.B().Eval().Script(flag+"return ARGV[1]").Numkeys(1).Key(key).Arg(key).Build()).ToString()
				if err != nil || got != key {
					errs <- fmt.Errorf("%d: %q, %v", i, got, err)
				}
				return
			}
			err := c.Do(ctx, c.B().Eval().Script("return 1").Numkeys(1).Key(key).Build()).Error()
			if err == nil || !strings.Contains(err.Error(), "KEYLOCK") {
				errs <- fmt.Errorf("%d: want a refusal, got %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPubSubPassesThrough(t *testing.T) {
	_, c := start(t, true, false)
	ctx := ctx(t)
	channel := redistest.Prefix(t)
	got := make(chan string, 1)
	subscribed := make(chan struct{})
	var once sync.Once
	dc, release := c.Dedicate()
	defer release()
	sctx, cancel := context.WithCancel(rueidis.WithOnSubscriptionHook(ctx, func(rueidis.PubSubSubscription) { once.Do(func() { close(subscribed) }) }))
	defer cancel()
	go func() {
		_ = dc.Receive(sctx, dc.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) { got <- m.Message })
	}()
	<-subscribed
	if err := c.Do(ctx, c.B().Publish().Channel(channel).Message("hi").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "hi" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
}

func TestStoreDetectsAndUsesTheFlag(t *testing.T) {
	p, c := start(t, true, false)
	ctx := ctx(t)
	s, err := redisstore.New(ctx, c, redisstore.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if on, known := s.KeyLockingEnabled(); !on || !known {
		t.Fatalf("KeyLockingEnabled = %v, %v", on, known)
	}
	if _, err := s.Append(ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	claim, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: "s", Holder: "h", TTL: time.Minute})
	if err != nil || len(claim.Heads) != 1 {
		t.Fatalf("claim: %+v, %v", claim, err)
	}
	if st := p.Stats(); st.Flagged == 0 || st.Plain != 0 || st.Refused != 0 {
		t.Fatalf("every script carried the flag: %+v", st)
	}
	off, err := redisstore.New(ctx, c, redisstore.Config{Prefix: redistest.Prefix(t), KeyLocking: redisstore.KeyLockingOff})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Append(ctx, "s", []a2redis.Event{{Type: "t"}}, redisstore.AppendOptions{}); err == nil || !strings.Contains(err.Error(), "KEYLOCK") {
		t.Fatalf("a store that does not send the flag is refused: %v", err)
	}
}

func TestUnflag(t *testing.T) {
	for _, c := range []struct{ in, shebang string }{
		{"#!lua flags=allow-key-locking\nreturn 1", "#!lua\n"},
		{"#!lua flags=no-writes,allow-key-locking\nreturn 1", "#!lua flags=no-writes\n"},
		{"#!lua flags=allow-key-locking,no-writes\nreturn 1", "#!lua flags=no-writes\n"},
	} {
		out, ok := keylockproxy.Unflag([]byte(c.in))
		if !ok || !strings.HasPrefix(string(out), c.shebang) || !strings.HasSuffix(string(out), "\nreturn 1") {
			t.Errorf("Unflag(%q) = %q, %v", c.in, out, ok)
		}
	}
	for _, in := range []string{"return 1", "#!lua\nreturn 1", "#!lua flags=no-writes\nreturn 1"} {
		if _, ok := keylockproxy.Unflag([]byte(in)); ok {
			t.Errorf("Unflag(%q) reported a flag", in)
		}
	}
	if got := keylockproxy.HashTag("a{b}c{d}"); got != "b" {
		t.Errorf("HashTag = %q", got)
	}
	if got := keylockproxy.HashTag("a{}c{d}"); got != "a{}c{d}" {
		t.Errorf("HashTag of an empty tag = %q", got)
	}
}
