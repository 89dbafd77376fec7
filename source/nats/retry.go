package nats

import (
	"time"

	"github.com/inorder/inorder/internal/retry"
)

func retryPolicy(initial, maxDelay time.Duration) retry.Policy {
	return retry.Policy{Initial: initial, Max: maxDelay, MaxElapsed: -1}
}
