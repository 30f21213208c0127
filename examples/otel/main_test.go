package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The example serves every a2otel metric for Prometheus once it has run a
// little.
func TestScrape(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	}()
	want := []string{
		"messaging_client_operation_duration_seconds_count",
		"messaging_client_sent_messages_total",
		"messaging_client_consumed_messages_total",
		"messaging_process_duration_seconds_count",
		"a2redis_events_completed_total",
		"a2redis_claim_to_start_duration_seconds_count",
		"a2redis_append_to_start_duration_seconds_count",
		"a2redis_handlers_in_flight",
		"a2redis_worker_outcomes_total",
		"a2redis_ready_sessions",
		"a2redis_ready_oldest_age_seconds",
		"a2redis_dead_letters",
		"a2redis_dead_letters_oldest_age_seconds",
		"a2redis_retention_passes_total",
		"a2redis_retention_sessions_total",
	}
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		missing := 0
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing++
			}
		}
		if missing == 0 {
			return
		}
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("the scrape has no %s", w)
		}
	}
}
