package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2redis/a2redis/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The example runs on its embedded miniredis and on a real server: every
// head is handled once, each customer's payments lane in order with the
// declined charge retried before the next, the returned events appended
// with their cause; the worker stops by itself.
func TestExample(t *testing.T) {
	for _, target := range []struct{ name, url string }{
		{"miniredis", ""},
		{"redis", "redis://" + redistest.ServerAddr(t)},
	} {
		t.Run(target.name, func(t *testing.T) {
			t.Setenv("A2REDIS_URL", target.url)
			t.Setenv("A2REDIS_PREFIX", redistest.Prefix(t))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			has := map[string]bool{}
			for _, l := range lines {
				has[l] = true
			}
			for _, want := range []string{
				"appended 4 events to customer-ada (#1-#4)",
				`mailer: customer-ada #1 order.placed {"order":1,"total":42} -> email.sent`,
				`mailer: customer-bob #3 order.placed {"order":2,"total":7} -> email.sent`,
				`auditor: customer-ada #2 order.paid {"order":1,"amount":42}`,
				`auditor: customer-bob #4 order.paid {"order":2,"amount":7}`,
				"billing: customer-ada #4 order.paid declined (attempt 1): retried after a backoff",
				"billing: customer-ada #4 order.paid (lane payments, attempt 2)",
				"worker stopped: every head handled",
			} {
				if !has[want] {
					t.Errorf("missing line %q in:\n%s", want, out.String())
				}
			}
			for _, customer := range []string{"customer-ada", "customer-bob"} {
				var order []string
				re := regexp.MustCompile(`^billing: ` + customer + ` (#\d) `)
				for _, l := range lines {
					if m := re.FindStringSubmatch(l); m != nil {
						order = append(order, m[1])
					}
				}
				want := "#1 #2 #3 #4"
				if customer == "customer-ada" {
					want = "#1 #2 #3 #4 #4" // the declined charge, then its retry
				}
				if got := strings.Join(order, " "); got != want {
					t.Errorf("%s's payments lane ran %s, want %s", customer, got, want)
				}
				log := out.String()[strings.Index(out.String(), customer+" log:"):]
				if first := strings.Index(log, "\n"); first >= 0 {
					if end := strings.Index(log[first:], " log:\n"); end >= 0 {
						log = log[:first+end]
					}
				}
				for _, cause := range []string{"#1", "#3"} {
					if !regexp.MustCompile(`\n  #[56] email.sent caused by mailer ` + cause + `\n`).MatchString(log) {
						t.Errorf("%s's log lacks the email.sent mailer %s returned:\n%s", customer, cause, log)
					}
				}
			}
		})
	}
}

// The README's worker is the example's startWorker, verbatim.
func TestReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	source, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(source, []byte("func startWorker("))
	j := bytes.Index(source[i:], []byte("\n}\n"))
	if i < 0 || j < 0 {
		t.Fatal("main.go has no startWorker")
	}
	fn := string(source[i : i+j+3])
	if !strings.Contains(string(readme), "```go\n"+fn+"```\n") {
		t.Errorf("README.md does not show startWorker as main.go has it:\n%s", fn)
	}
	if n := strings.Count(fn, "\n"); n >= 20 {
		t.Errorf("the README's worker takes %d lines; the issue promises under 20", n)
	}
}
