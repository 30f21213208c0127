package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/notify"
)

// panickingReceive is a client whose subscriptions panic in Receive.
type panickingReceive struct{ rueidis.Client }

func (c panickingReceive) Dedicate() (rueidis.DedicatedClient, func()) {
	d, release := c.Client.Dedicate()
	return panickingDedicated{d}, release
}

type panickingDedicated struct{ rueidis.DedicatedClient }

func (panickingDedicated) Receive(context.Context, rueidis.Completed, func(rueidis.PubSubMessage)) error {
	panic("boom in Receive")
}

// Issue 22: a panic under a subscription's reader goroutine ends Subscribe
// with an error; the process survives.
func TestSubscribeRecoversAPanic(t *testing.T) {
	_, client := redistest.Miniredis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub := notify.NewSubscriber(panickingReceive{client}, notify.SubscriberOptions{})
	err := sub.Subscribe(ctx, redistest.Prefix(t), func(notify.Notice) error { return nil })
	require.ErrorContains(t, err, "panicked: boom in Receive")
}
