package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/source/pgtable"
)

// Sources of the demo's workload (--source).
// demoWriters is how many concurrent writers append the workload to the
// events table: their transactions take positions in one order and commit
// in another.
const demoWriters = 4

// consumeTable appends the workload to inorder's events table in the demo
// schema from concurrent writers while --consumers sources share its
// partitions, cuts one consumer off halfway (the others take its
// partitions over), and runs until the whole workload is applied.
func (d *demoRun) consumeTable(ctx context.Context) (demoStats, error) {
	d.events = d.workload()
	total := int64(len(d.events))
	srcs, err := consumers(d, func() (*pgtable.Source, error) {
		return pgtable.New(&pgtable.Config{
			Pool: d.pool, Processor: d.proc, Name: "demo", Workers: 2, BatchSize: d.o.BatchSize, MaxWait: d.o.MaxWait,
			LeaseEvery: 200 * time.Millisecond, CheckpointEvery: 200 * time.Millisecond, Logger: d.logger,
		})
	})
	if err != nil {
		return demoStats{}, err
	}
	running := runAll(ctx, srcs)
	defer running.stop()
	d.con.Printf([]any{"consumers", len(srcs), "writers", demoWriters}, "appending %d events to the events table from %d concurrent writers; %d consumers share its partitions",
		total, demoWriters, len(srcs))
	appended := make(chan error, 1)
	go func() { appended <- d.appendTable(running.ctx) }()

	cut := len(srcs) > 1
	elapsed, err := d.await(ctx, awaiting{total: total, feed: appended, stopAll: running.stopAll,
		each: func(events int64, bar *clikit.ProgressBar) {
			if cut && events >= total/2 {
				cut = false
				srcs[0].Abort() // its batches in flight roll back; its leases go with its connection
				bar.Note(fmt.Sprintf("consumer 1 cut off at %d events: its batches in flight roll back (or commit unheard), the others take its partitions over", events))
			}
		}})
	if err != nil {
		return demoStats{}, err
	}
	return finish(d, running, pgtable.ErrAborted, elapsed, srcs, func(s *pgtable.Source) int64 { return s.Stats().Read },
		fmt.Sprintf("%d sharing the events table's partitions (one cut off halfway)", len(srcs)))
}

// appendTable appends the workload from demoWriters writers, each with the
// aggregates of its own, in transactions of up to 50 events.
func (d *demoRun) appendTable(ctx context.Context) error {
	w := pgtable.NewWriter(d.o.Schema, nil)
	parts := make([][]aggregate.Event, demoWriters)
	owner := map[string]int{}
	for _, e := range d.events {
		e.ID = demoEventID(e).String() // the ids the in-process EventStoreDB gives
		k, ok := owner[e.Aggregate]
		if !ok {
			k = len(owner) % demoWriters
			owner[e.Aggregate] = k
		}
		parts[k] = append(parts[k], e)
	}
	var wg sync.WaitGroup
	errs := make([]error, demoWriters)
	for i, events := range parts {
		wg.Go(func() {
			for len(events) > 0 && errs[i] == nil {
				n := min(len(events), 50)
				errs[i] = w.Append(ctx, d.pool, events[:n]...)
				events = events[n:]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("demo: append: %w", err)
	}
	return nil
}
