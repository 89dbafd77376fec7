package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/retry"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for n, want := range map[int]time.Duration{1: 10, 2: 20, 3: 40, 4: 80, 5: 80, 100: 80, 0: 10} {
		want *= time.Millisecond
		for range 50 {
			d := p.Delay(n)
			require.GreaterOrEqual(t, d, want/2, "retry %d", n)
			require.LessOrEqual(t, d, want, "retry %d", n)
		}
	}
	// The zero policy has defaults.
	d := retry.Policy{}.Delay(1)
	require.GreaterOrEqual(t, d, retry.DefaultInitial/2)
	require.LessOrEqual(t, d, retry.DefaultInitial)
	require.LessOrEqual(t, retry.Policy{}.Delay(1000), retry.DefaultMax)
}

func TestBackoffStopsAtMaxElapsed(t *testing.T) {
	t.Parallel()
	b := retry.Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond, MaxElapsed: 30 * time.Millisecond}.Start()
	var slept time.Duration
	for {
		ok, err := b.Wait(context.Background())
		require.NoError(t, err)
		if !ok {
			break
		}
		slept += time.Millisecond // at least
		require.Less(t, b.Retries(), 100, "the elapsed bound must end the retries")
	}
	// Wait refuses only once the next delay (at most Max) would pass the
	// bound; how many retries fit depends on how late the sleeps wake on
	// a busy machine, so only the first must.
	require.GreaterOrEqual(t, b.Retries(), 1, "retries while the bound allows")
	require.Greater(t, b.Elapsed(), 30*time.Millisecond-4*time.Millisecond, "stops at the bound, not before")
	b.Reset()
	require.Zero(t, b.Retries())
	_, ok := b.Next()
	require.True(t, ok, "Reset starts the elapsed time again")
}

func TestUnbounded(t *testing.T) {
	t.Parallel()
	b := retry.Policy{Initial: time.Hour, Max: time.Hour, MaxElapsed: -1}.Start()
	for range 10 {
		d, ok := b.Next()
		require.True(t, ok)
		require.GreaterOrEqual(t, d, 30*time.Minute)
	}
}

func TestSleepCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, retry.Sleep(ctx, time.Hour), context.Canceled)
	require.ErrorIs(t, retry.Sleep(ctx, 0), context.Canceled)
	require.NoError(t, retry.Sleep(context.Background(), time.Microsecond))
}
