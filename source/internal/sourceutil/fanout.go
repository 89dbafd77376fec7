package sourceutil

import (
	"context"
	"hash/fnv"
	"sync"

	"github.com/inorder/inorder/aggregate"
)

// FanOut runs a replay's read and emit: read calls send with every event,
// in the source's order; workers goroutines call emit with batches of up to
// batchSize of them, an aggregate's events all on one goroutine, in the
// order sent. A batch goes out when it is full or when nothing more is
// queued for its goroutine (the reader waits on the server). The first
// error of emit cancels the ctx read runs under and is returned; otherwise
// read's.
func FanOut(ctx context.Context, workers, batchSize int, emit func(context.Context, []aggregate.Event) error,
	read func(ctx context.Context, send func(aggregate.Event) error) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	chans := make([]chan aggregate.Event, workers)
	var wg sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan aggregate.Event, batchSize)
		wg.Go(func() {
			batch := make([]aggregate.Event, 0, batchSize)
			failed := false
			flush := func() {
				if len(batch) > 0 && !failed {
					if err := emit(ctx, batch); err != nil {
						cancel(err)
						failed = true
					}
				}
				batch = make([]aggregate.Event, 0, batchSize)
			}
			for e := range chans[i] {
				if failed {
					continue // drain: the reader stops on ctx
				}
				batch = append(batch, e)
				if len(batch) >= batchSize || len(chans[i]) == 0 {
					flush()
				}
			}
			flush()
		})
	}
	readErr := read(ctx, func(e aggregate.Event) error {
		h := fnv.New64a()
		h.Write([]byte(e.Aggregate))
		select {
		case chans[h.Sum64()%uint64(len(chans))] <- e:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return readErr
}
