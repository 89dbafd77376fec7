package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// awaitEvery is how often the demo reads the read model's progress.
const awaitEvery = 50 * time.Millisecond

// awaiting is what await watches.
type awaiting struct {
	// total is the number of events of the workload.
	total int64
	// feed, if set, receives the end of whatever feeds the source while it
	// is consumed (the publisher, the writers): an error stops the demo.
	feed <-chan error
	// stopAll stops the consumers, when the demo gives up.
	stopAll func() error
	// each, if set, is called at each reading with the events in the read
	// model so far: for the simulated failures.
	each func(events int64, bar *clikit.ProgressBar)
}

// await shows progress until the read model holds every event of the
// workload, and returns how long that took. Progress is the read model's
// event count (the sum of its applied versions, what Processor.Status
// reads), not the processor's Applied counter: a batch that committed while
// its consumer was cut off (Abort cancels before the COMMIT's answer
// arrives) is in the read model but was never counted as applied — the
// processor saw it fail — and its redelivered events count as duplicates,
// so the counter never reaches the total (the NATS demo stuck at 938 of
// 1000 for that reason).
func (d *demoRun) await(ctx context.Context, a awaiting) (time.Duration, error) {
	start := time.Now()
	bar := clikit.NewProgressBar(d.con, "applied", "events", a.total)
	tick := time.NewTicker(awaitEvery)
	defer tick.Stop()
	deadline := time.NewTimer(d.o.Timeout)
	defer deadline.Stop()
	feed := a.feed
	var events, last int64
	lastProgress := time.Now()
	for events < a.total {
		select {
		case <-ctx.Done():
			_ = a.stopAll()
			return 0, ctx.Err()
		case <-d.a.Drain():
			_ = a.stopAll()
			return 0, fmt.Errorf("demo: interrupted after %d of %d events", events, a.total)
		case <-deadline.C:
			_ = a.stopAll()
			return 0, fmt.Errorf("demo: %d of %d events applied after %s (--timeout)", events, a.total, d.o.Timeout)
		case err := <-feed:
			if err != nil {
				_ = a.stopAll()
				return 0, err
			}
			feed = nil // fed: nothing more comes
		case <-tick.C:
		}
		var err error
		if events, err = d.readModelEvents(ctx); err != nil {
			_ = a.stopAll()
			return 0, err
		}
		bar.Update(events)
		if a.each != nil {
			a.each(events, bar)
		}
		if events != last {
			last, lastProgress = events, time.Now()
		} else if time.Since(lastProgress) > time.Minute {
			_ = a.stopAll()
			return 0, fmt.Errorf("demo: stuck at %d of %d events applied for a minute; see '%s status' and '%s parked list'", events, a.total, d.a.Name(), d.a.Name())
		}
	}
	elapsed := time.Since(start)
	bar.Finish(events)
	return elapsed, nil
}

// readModelEvents returns the events in the demo projection's read model:
// the sum of its applied versions.
func (d *demoRun) readModelEvents(ctx context.Context) (int64, error) {
	st, err := d.proc.Status(ctx, &projection.StatusOptions{Entries: -1})
	if err != nil {
		return 0, fmt.Errorf("demo: read the read model's progress: %w", err)
	}
	for _, p := range st.Projections {
		if p.Name == d.proj {
			return p.Events, nil
		}
	}
	return 0, fmt.Errorf("demo: projection %q not in the status", d.proj)
}
