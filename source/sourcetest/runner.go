package sourcetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// The dispatcher's settings of every consumer the suite starts: small
// batches, so that a few hundred events make many.
const (
	suiteWorkers   = 4
	suiteBatchSize = 20
	suiteMaxWait   = 5 * time.Millisecond
	suiteLagEvery  = 100 * time.Millisecond
)

// envChild holds a child's configuration (childConfig, as JSON).
const envChild = "INORDER_SOURCETEST_CHILD"

type runner struct {
	s Subject
	f Features
}

// tcase is a Case prepared for one check: its processor's schema, and a
// signal of progress.
type tcase struct {
	*Case
	r        *runner
	name     string
	db       *pgtest.DB
	ctx      context.Context
	progress chan struct{} // cap 1: a batch committed somewhere
	rng      *rand.Rand
}

func (r *runner) newCase(t *testing.T) *tcase {
	t.Helper()
	c := r.s.New(t)
	if c == nil || c.Publish == nil {
		t.Fatal("sourcetest: Subject.New must return a Case with Publish")
	}
	ctx, cancel := context.WithTimeout(t.Context(), r.f.Timeout)
	t.Cleanup(cancel)
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	tc := &tcase{Case: c, r: r, name: t.Name(), db: pgtest.NewMigrated(t), ctx: ctx,
		progress: make(chan struct{}, 1), rng: rand.New(rand.NewPCG(h.Sum64(), 22))}
	// The read model's table, before any consumer (a child's) creates it.
	_, err := newProcessor(ctx, tc.db.Pool, tc.db.Schema, &foldProjection{}, projection.Config{})
	must(t, err)
	return tc
}

func (c *tcase) notify() {
	select {
	case c.progress <- struct{}{}:
	default:
	}
}

// publish publishes msgs, in chunks.
func (c *tcase) publish(t testing.TB, msgs []Message) {
	t.Helper()
	for len(msgs) > 0 {
		n := min(len(msgs), 200)
		if err := c.Publish(c.ctx, msgs[:n]); err != nil {
			t.Fatalf("sourcetest: publish: %v", err)
		}
		msgs = msgs[n:]
	}
}

// waitUntil waits until cond holds, checking it after each commit and at
// least every 100 ms.
func (c *tcase) waitUntil(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	c.waitUntilf(t, func() string { return what }, cond)
}

// waitUntilf is waitUntil with a description made when it times out.
func (c *tcase) waitUntilf(t testing.TB, what func() string, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("sourcetest: waiting for %s: %v", what(), err)
		}
		if ok {
			return
		}
		select {
		case <-c.progress:
		case <-tick.C:
		case <-c.ctx.Done():
			t.Fatalf("sourcetest: timed out waiting for %s", what())
		}
	}
}

// waitApplied waits until the read model holds at least n versions.
func (c *tcase) waitApplied(t testing.TB, n int) {
	t.Helper()
	last := -1
	c.waitUntilf(t, func() string { return fmt.Sprintf("%d events applied (%d are)", n, last) }, func() (bool, error) {
		got, err := appliedCount(c.ctx, c.db.Pool)
		last = got
		return got >= n, err
	})
}

func (c *tcase) applied(t testing.TB) int {
	t.Helper()
	n, err := appliedCount(c.ctx, c.db.Pool)
	if err != nil {
		t.Fatalf("sourcetest: %v", err)
	}
	return n
}

// requireClean requires nothing parked, quarantined, rejected or in
// conflict.
func (c *tcase) requireClean(t testing.TB, p *projection.Processor) {
	t.Helper()
	opts := projection.ListOptions{Limit: 10}
	parked, err := p.Parked(c.ctx, opts)
	must(t, err)
	quarantined, err := p.Quarantined(c.ctx, opts)
	must(t, err)
	rejected, err := p.Rejected(c.ctx, opts)
	must(t, err)
	conflicts, err := p.Conflicts(c.ctx, opts)
	must(t, err)
	if len(parked)+len(quarantined)+len(rejected)+len(conflicts) > 0 {
		t.Fatalf("sourcetest: left over: %d parked %v, %d quarantined %v, %d rejected %v, %d conflicts %v",
			len(parked), parked, len(quarantined), quarantined, len(rejected), rejected, len(conflicts), conflicts)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("sourcetest: %v", err)
	}
}

// consumer is a consumer running in the test process.
type consumer struct {
	feed   source.Feed
	proc   *projection.Processor
	cancel context.CancelFunc
	done   chan error
	ready  chan struct{}
	// Counted from the processor's batches.
	batches, events, failed atomic.Int64
	outcomes                [8]atomic.Int64 // by projection.Outcome
}

// options of an in-process consumer.
type startOptions struct {
	worker string
	fail   func(aggregate.Event) error
	proc   projection.Config
}

// newConsumer makes a consumer named name, not started.
func (c *tcase) newConsumer(t testing.TB, name string, o startOptions) *consumer {
	t.Helper()
	k := &consumer{done: make(chan error, 1), ready: make(chan struct{})}
	pc := o.proc
	pc.Logger = testLogger(t)
	pc.OnBatch = func(bi projection.BatchInfo) {
		if bi.Err != nil {
			k.failed.Add(1)
			return
		}
		if bi.Events > 0 {
			k.batches.Add(1)
			k.events.Add(int64(bi.Events))
		}
		for o, n := range bi.Outcomes {
			k.outcomes[o].Add(int64(n))
		}
		c.notify()
	}
	f := &foldProjection{worker: cmpOr(o.worker, "test"), fail: o.fail}
	var err error
	k.proc, err = newProcessor(c.ctx, c.db.Pool, c.db.Schema, f, pc)
	must(t, err)
	var once atomic.Bool
	k.feed, err = c.r.s.Consumer(c.ctx, c.Env, &ConsumerConfig{
		Processor: k.proc, Name: name, Workers: suiteWorkers, BatchSize: suiteBatchSize, MaxWait: suiteMaxWait,
		LagEvery: suiteLagEvery, Logger: testLogger(t),
		OnReady: func() {
			if once.CompareAndSwap(false, true) {
				close(k.ready)
			}
		},
	})
	must(t, err)
	return k
}

// start runs k until stop (or the test's end).
func (k *consumer) start(t testing.TB) *consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	k.cancel = cancel
	go func() { k.done <- k.feed.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		k.feed.Abort()
		<-k.done
		k.done <- nil
	})
	return k
}

// stop stops k gracefully and requires Run to return nil.
func (k *consumer) stop(t testing.TB) {
	t.Helper()
	k.cancel()
	select {
	case err := <-k.done:
		k.done <- nil
		if err != nil {
			t.Fatalf("sourcetest: the consumer's Run returned %v after a graceful stop", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("sourcetest: the consumer did not drain within a minute")
	}
}

// childConfig is what a child process needs.
type childConfig struct {
	Subject string
	Case    map[string]string
	DB      string
	Schema  string
	Name    string
	Worker  string
}

// child is a consumer running in a child process.
type child struct {
	p                            *proctest.Proc
	worker                       string
	ready                        chan struct{}
	finished                     chan struct{} // its lines are all read
	stopped                      atomic.Bool   // it said STOPPED: Run returned nil
	batches, applied, duplicates atomic.Int64
}

// spawn starts a consumer named name in a child process; its projection
// records worker as the one that applied its events.
func (c *tcase) spawn(t testing.TB, name, worker string) *child {
	t.Helper()
	cfg, err := json.Marshal(childConfig{Subject: c.r.s.Name, Case: c.Env, DB: c.db.URL, Schema: c.db.Schema, Name: name, Worker: worker})
	must(t, err)
	k := &child{worker: worker, ready: make(chan struct{}), finished: make(chan struct{})}
	k.p = proctest.Start(t, roleName(c.r.s.Name), proctest.Options{Name: worker, Env: map[string]string{envChild: string(cfg)}})
	go func() {
		defer close(k.finished)
		readyOnce := false
		for m := range k.p.Messages() {
			switch m.Kind {
			case "READY":
				if !readyOnce {
					readyOnce = true
					close(k.ready)
				}
			case "BATCH":
				f := strings.Fields(m.Payload)
				if len(f) == 2 {
					a, _ := strconv.ParseInt(f[0], 10, 64)
					d, _ := strconv.ParseInt(f[1], 10, 64)
					k.batches.Add(1)
					k.applied.Add(a)
					k.duplicates.Add(d)
				}
				c.notify()
			case "STOPPED":
				k.stopped.Store(true)
			}
		}
		c.notify()
	}()
	return k
}

// waitReady waits for the child's consumer to be ready.
func (k *child) waitReady(t testing.TB, ctx context.Context) {
	t.Helper()
	select {
	case <-k.ready:
	case <-k.finished:
		t.Fatalf("sourcetest: %s exited before it was ready: %v", k.worker, k.p.Output())
	case <-ctx.Done():
		t.Fatalf("sourcetest: %s not ready in time", k.worker)
	}
}

// kill SIGKILLs the child.
func (k *child) kill(t testing.TB) {
	t.Helper()
	k.p.Kill(t)
	<-k.finished
}

// stop stops the child gracefully and requires a clean exit after its
// consumer's Run returned nil.
func (k *child) stop(t testing.TB) {
	t.Helper()
	k.p.Interrupt(t)
	k.p.RequireExit(t)
	<-k.finished
	if !k.stopped.Load() {
		t.Fatalf("sourcetest: %s exited without a graceful stop", k.worker)
	}
}

func roleName(subject string) string { return "sourcetest/" + subject }

// Main runs the tests, or, in a child process the suite started, the
// consumer of one of subjects: call it from TestMain with the subjects the
// package's tests give Run. It does not return.
func Main(m *testing.M, subjects ...Subject) {
	roles := map[string]proctest.Role{}
	for _, s := range subjects {
		roles[roleName(s.Name)] = childRole(s)
	}
	proctest.Main(m, roles)
}

// childRole runs one consumer until SIGINT, saying READY once it is ready,
// BATCH <applied> <duplicates> after each committed batch, and STOPPED
// once Run returned nil.
func childRole(s Subject) proctest.Role {
	return func(ctx context.Context, ch *proctest.Child) error {
		var cfg childConfig
		if err := json.Unmarshal([]byte(os.Getenv(envChild)), &cfg); err != nil {
			return fmt.Errorf("%s: %w", envChild, err)
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		pool, err := pgxpool.New(ctx, cfg.DB)
		if err != nil {
			return err
		}
		defer pool.Close()
		proc, err := newProcessor(ctx, pool, cfg.Schema, &foldProjection{worker: cfg.Worker}, projection.Config{
			Logger: logger,
			OnBatch: func(bi projection.BatchInfo) {
				if bi.Err == nil && bi.Events > 0 {
					ch.Say("BATCH", bi.Outcomes[projection.Applied], bi.Outcomes[projection.Duplicate])
				}
			},
		})
		if err != nil {
			return err
		}
		feed, err := s.Consumer(ctx, cfg.Case, &ConsumerConfig{
			Processor: proc, Name: cfg.Name, Workers: suiteWorkers, BatchSize: suiteBatchSize, MaxWait: suiteMaxWait,
			LagEvery: suiteLagEvery, Logger: logger, OnReady: func() { ch.Say("READY") },
		})
		if err != nil {
			return err
		}
		if err := feed.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		ch.Say("STOPPED")
		return nil
	}
}

// testLogger logs warnings and errors through t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	defer func() { _ = recover() }() // a log after the test ended
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
