package faultproxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/faultproxy"
	"github.com/a2redis/a2redis/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func start(t *testing.T, rule faultproxy.Rule, resp2 bool) (*faultproxy.Proxy, rueidis.Client, rueidis.Client) {
	t.Helper()
	addr := redistest.ServerAddr(t)
	p, err := faultproxy.Start(addr, rule)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	through, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, ForceSingleClient: true, DisableCache: true, AlwaysRESP2: resp2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(through.Close)
	direct, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	return p, through, direct
}

// Each fault happens at the command it names, no other: of nine SETs the
// 3rd, 6th and 9th fail, the GETs in between are not counted, and what the
// server holds tells whether the command reached it.
func TestFaultsAtTheNthCommand(t *testing.T) {
	for _, tc := range []struct {
		fault   faultproxy.Fault
		written bool // whether a faulted SET reaches the server
		fails   bool // whether the client sees an error
	}{
		{faultproxy.DropReply, true, true},
		{faultproxy.DropCommand, false, true},
		{faultproxy.Stall, true, false},
	} {
		for _, resp2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/resp2=%v", tc.fault, resp2), func(t *testing.T) {
				p, through, direct := start(t, faultproxy.Rule{Commands: []string{"set"}, Every: 3, Fault: tc.fault, Stall: 20 * time.Millisecond}, resp2)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				prefix := redistest.Prefix(t)
				for i := 1; i <= 9; i++ {
					key := fmt.Sprintf("%s:k%d", prefix, i)
					err := through.Do(ctx, through.B().Set().Key(key).Value("v").Build()).Error()
					if err := through.Do(ctx, through.B().Get().Key(prefix+":other").Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
						t.Fatalf("GET after SET %d: %v", i, err)
					}
					faulted := i%3 == 0
					if got, want := err != nil, faulted && tc.fails; got != want {
						t.Errorf("SET %d: error %v, want an error: %v", i, err, want)
					}
					exists, err := direct.Do(ctx, direct.B().Exists().Key(key).Build()).AsInt64()
					if err != nil {
						t.Fatal(err)
					}
					if want := !faulted || tc.written; (exists == 1) != want {
						t.Errorf("SET %d (faulted %v): key stored %v, want %v", i, faulted, exists == 1, want)
					}
				}
				st := p.Stats()
				if st.Faults != 3 || st.Counted != 9 || st.Commands < 18 {
					t.Errorf("stats %+v: want 3 faults of 9 counted commands, at least 18 read", st)
				}
			})
		}
	}
}

// Nth, Limit and SetRule: the count restarts with a new rule, and faults
// stop at the limit. (ECHO: the client sends none of its own.)
func TestRuleNthAndLimit(t *testing.T) {
	p, through, _ := start(t, faultproxy.Rule{Commands: []string{"ECHO"}, Nth: []int64{2}, Fault: faultproxy.DropCommand}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []int
	for i := 1; i <= 4; i++ {
		if err := through.Do(ctx, through.B().Echo().Message("e").Build()).Error(); err != nil {
			errs = append(errs, i)
		}
	}
	if fmt.Sprint(errs) != "[2]" {
		t.Errorf("ECHOs that failed: %v, want [2]", errs)
	}
	p.SetRule(faultproxy.Rule{Commands: []string{"ECHO"}, Every: 1, Limit: 3, Fault: faultproxy.DropCommand})
	errs = nil
	for i := 1; i <= 6; i++ {
		if err := through.Do(ctx, through.B().Echo().Message("e").Build()).Error(); err != nil {
			errs = append(errs, i)
		}
	}
	if fmt.Sprint(errs) != "[1 2 3]" {
		t.Errorf("ECHOs that failed after SetRule: %v, want [1 2 3]", errs)
	}
	if st := p.Stats(); st.Faults != 4 {
		t.Errorf("faults %d, want 4", st.Faults)
	}
}

// Faults cycles: the kth fault is Faults[k % len].
func TestRuleCyclesFaults(t *testing.T) {
	_, through, direct := start(t, faultproxy.Rule{Commands: []string{"SET"}, Every: 1, Limit: 4,
		Faults: []faultproxy.Fault{faultproxy.DropReply, faultproxy.DropCommand}}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)
	var stored []int64
	for i := 1; i <= 4; i++ {
		key := fmt.Sprintf("%s:k%d", prefix, i)
		if err := through.Do(ctx, through.B().Set().Key(key).Value("v").Build()).Error(); err == nil {
			t.Errorf("SET %d: no error", i)
		}
		n, err := direct.Do(ctx, direct.B().Exists().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, n)
	}
	if fmt.Sprint(stored) != "[1 0 1 0]" {
		t.Errorf("keys stored %v, want [1 0 1 0] (reply dropped, command dropped, ...)", stored)
	}
}

// Pub/sub passes through: a subscriber on the proxy receives what is
// published, and its pushes are never taken for replies.
func TestPubSubPassesThrough(t *testing.T) {
	_, through, direct := start(t, faultproxy.Rule{}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := redistest.Prefix(t) + ":ch"
	got := make(chan string, 1)
	subscribed := make(chan struct{})
	go func() {
		_ = through.Receive(ctx, through.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
			select {
			case got <- m.Message:
			default:
			}
		})
	}()
	go func() {
		defer close(subscribed)
		for ctx.Err() == nil {
			n, _ := direct.Do(ctx, direct.B().Publish().Channel(ch).Message("hello").Build()).AsInt64()
			if n > 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {
	case m := <-got:
		if m != "hello" {
			t.Errorf("message %q", m)
		}
	case <-ctx.Done():
		t.Fatal("no message through the proxy")
	}
	<-subscribed
	if err := through.Do(ctx, through.B().Ping().Build()).Error(); err != nil {
		t.Errorf("PING after a subscription: %v", err)
	}
}
