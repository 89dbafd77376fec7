package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// fold: a stream with republished copies, half of it there before the
// consumer starts and half published while it runs, reaches the read model
// once per event, in batches; a graceful stop drains.
func (r *runner) fold(t *testing.T, c *tcase) {
	events := stream(c.rng, "fold-", r.f.Aggregates, 1, r.f.Versions)
	pubs := withCopies(c.rng, events, 0.25)
	half := len(pubs) / 2
	c.publish(t, pubs[:half])
	k := c.newConsumer(t, "fold", startOptions{}).start(t)
	c.publish(t, pubs[half:])
	c.waitApplied(t, len(events))
	k.stop(t)
	checkFold(t, c.db.Pool, events)
	c.requireClean(t, k.proc)
	batches, n := k.batches.Load(), k.events.Load()
	t.Logf("%d events, %d published, %d delivered in %d batches (%.1f per batch), %d duplicates absorbed",
		len(events), len(pubs), n, batches, float64(n)/float64(max(batches, 1)), k.outcomes[projection.Duplicate].Load())
	if float64(n) < 2*float64(batches) {
		t.Fatalf("sourcetest: %d deliveries in %d batches: the source does not batch", n, batches)
	}
	if k.failed.Load() > 0 {
		t.Fatalf("sourcetest: %d batches failed", k.failed.Load())
	}
}

// lag: measured behind while events wait and 0 once caught up, in events
// and seconds, and exported as inorder_source_lag_events and _seconds.
func (r *runner) lag(t *testing.T, c *tcase) {
	first := stream(c.rng, "lag-", 10, 1, 3)
	c.publish(t, first)
	k := c.newConsumer(t, "lag", startOptions{}).start(t)
	c.waitApplied(t, len(first))
	k.stop(t)

	more := stream(c.rng, "lag-", 10, 4, 2)
	c.publish(t, more)
	k = c.newConsumer(t, "lag", startOptions{})
	reg := prometheus.NewRegistry()
	must(t, k.feed.RegisterMetrics(reg))
	waiting, err := k.feed.MeasureLag(c.ctx)
	must(t, err)
	l := waiting
	if !l.Known || l.Events <= 0 || l.Events > int64(2*len(more)) || l.Behind <= 0 {
		t.Fatalf("sourcetest: with %d events waiting the lag is %+v: want Known, 0 < Events ≤ %d, Behind > 0", len(more), l, 2*len(more))
	}
	ev, sec := lagMetrics(t, reg, "lag")
	if ev != float64(l.Events) || sec <= 0 {
		t.Fatalf("sourcetest: with %d events waiting the metrics say inorder_source_lag_events %v, _seconds %v: want %d and > 0", len(more), ev, sec, l.Events)
	}
	k.start(t)
	c.waitApplied(t, len(first)+len(more))
	c.waitUntil(t, "a lag of 0", func() (bool, error) {
		l, err = k.feed.MeasureLag(c.ctx)
		return err == nil && l.Events == 0 && l.Behind == 0, err
	})
	if ev, sec := lagMetrics(t, reg, "lag"); ev != 0 || sec != 0 {
		t.Fatalf("sourcetest: caught up, the metrics say inorder_source_lag_events %v, _seconds %v: want 0 and 0", ev, sec)
	}
	t.Logf("lag with %d events waiting: %d events, %v; caught up: %d events, %v", len(more), waiting.Events, waiting.Behind, l.Events, l.Behind)
	k.stop(t)
	checkFold(t, c.db.Pool, append(first, more...))
}

// lagMetrics gathers reg and returns the lag gauges of source name.
func lagMetrics(t testing.TB, reg *prometheus.Registry, name string) (events, seconds float64) {
	t.Helper()
	mfs, err := reg.Gather()
	must(t, err)
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "source" && l.GetValue() == name
			}) {
				continue
			}
			switch mf.GetName() {
			case "inorder_source_lag_events":
				events, found[mf.GetName()] = m.GetGauge().GetValue(), true
			case "inorder_source_lag_seconds":
				seconds, found[mf.GetName()] = m.GetGauge().GetValue(), true
			}
		}
	}
	if !found["inorder_source_lag_events"] || !found["inorder_source_lag_seconds"] {
		t.Fatalf("sourcetest: inorder_source_lag_events and inorder_source_lag_seconds{source=%q} not both exported once measured", name)
	}
	return events, seconds
}

// sigkill: a consumer in a child process is SIGKILLed after it applied
// part of the stream; the next one resumes from the checkpoint: nothing
// lost, fewer duplicates than events applied before the kill.
func (r *runner) sigkill(t *testing.T, c *tcase) {
	events := stream(c.rng, "kill-", r.f.Aggregates, 1, r.f.Versions)
	half := len(events) / 2
	c.publish(t, events[:half])
	first := c.spawn(t, "killed", "first")
	c.waitApplied(t, 3*half/4)
	first.kill(t)
	before := c.applied(t)
	c.publish(t, events[half:])
	second := c.spawn(t, "killed", "second")
	c.waitApplied(t, len(events))
	second.stop(t)
	checkFold(t, c.db.Pool, events)
	dups := second.duplicates.Load()
	t.Logf("killed after %d of %d events were applied; the next process applied %d and absorbed %d duplicates", before, len(events), second.applied.Load(), dups)
	if dups >= int64(before) {
		t.Fatalf("sourcetest: after the kill, %d of the %d events applied came again: the consumer did not resume from a checkpoint", dups, before)
	}
}

// errFlaky is a transient failure (a serialization failure), which the
// processor retries for at most its MaxRetryTime and then returns: the
// source must redeliver or retry the batch.
var errFlaky = &pgconn.PgError{Code: "40001", Message: "sourcetest: injected serialization failure"}

// errPoison is a handler's failure for good.
var errPoison = errors.New("sourcetest: poison event")

// failures: batches that fail are redelivered or retried until applied; an
// event whose handler always fails is quarantined and its successors
// parked; nothing is dropped, and what follows is applied.
func (r *runner) failures(t *testing.T, c *tcase) {
	events := stream(c.rng, "fail-", 12, 1, 5)
	const poison = "fail-000"
	var mu sync.Mutex
	failedOnce := map[string]bool{}
	flaky := 0
	fail := func(e aggregate.Event) error {
		if e.Aggregate == poison && e.Version == 3 {
			return errPoison
		}
		// The first delivery of every version 2 fails its batch.
		mu.Lock()
		defer mu.Unlock()
		if e.Version == 2 && !failedOnce[e.Aggregate] {
			failedOnce[e.Aggregate] = true
			flaky++
			return errFlaky
		}
		return nil
	}
	k := c.newConsumer(t, "failures", startOptions{fail: fail, proc: projection.Config{
		MaxRetryTime: time.Millisecond, RetryBackoff: time.Millisecond, MaxAttempts: 2,
	}}).start(t)
	c.publish(t, events)
	want := len(events) - 3 // the poison's versions 3 (quarantined), 4 and 5 (parked)
	c.waitApplied(t, want)
	c.waitUntil(t, "the poison event quarantined and its successors parked", func() (bool, error) {
		q, err := k.proc.Quarantined(c.ctx, projection.ListOptions{Aggregate: poison})
		if err != nil {
			return false, err
		}
		p, err := k.proc.Parked(c.ctx, projection.ListOptions{Aggregate: poison})
		return len(q) == 1 && q[0].Version == 3 && len(p) == 2, err
	})
	k.stop(t)
	var valid []Message
	for _, m := range events {
		if m.Aggregate != poison || m.Version < 3 {
			valid = append(valid, m)
		}
	}
	checkFold(t, c.db.Pool, valid)
	if k.failed.Load() == 0 {
		t.Fatal("sourcetest: no batch failed: the injected failures did not reach the source")
	}
	t.Logf("%d batches failed (%d injected transient failures); redelivered by the server: %v", k.failed.Load(), flaky, r.f.Redelivers)
}

// hostile: invalid envelopes among valid events are recorded as rejected
// and do not hold up what follows.
func (r *runner) hostile(t *testing.T, c *tcase) {
	valid := stream(c.rng, "ok-", 6, 1, 4)
	big := `{"pad":"` + strings.Repeat("x", 8<<10) + `"}`
	hostile := []struct {
		name string
		m    Message
	}{
		{"no aggregate id", Message{Aggregate: "", Version: 1, Type: eventType, Data: []byte(`{}`)}},
		{"version 0", Message{Aggregate: "bad-version", Version: 0, Type: eventType, Data: []byte(`{}`)}},
		{"negative version", Message{Aggregate: "bad-version", Version: -2, Type: eventType, Data: []byte(`{}`)}},
		{"invalid JSON", Message{Aggregate: "bad-json", Version: 1, Type: eventType, Data: []byte(`{"unterminated`)}},
		{"NUL byte in the aggregate id", Message{Aggregate: "bad\x00nul", Version: 1, Type: eventType, Data: []byte(`{}`)}},
		{"NUL byte in the type", Message{Aggregate: "bad-nul-type", Version: 1, Type: "bad\x00type", Data: []byte(`{}`)}},
		{"oversized", Message{Aggregate: "bad-size", Version: 1, Type: eventType, Data: []byte(big)}},
	}
	k := c.newConsumer(t, "hostile", startOptions{proc: projection.Config{Limits: aggregate.Limits{MaxPayload: 4 << 10}}}).start(t)
	third := len(valid) / 3
	c.publish(t, valid[:third])
	published := 0
	var unrepresentable []string
	for _, h := range hostile {
		err := c.Publish(c.ctx, []Message{h.m})
		switch {
		case errors.Is(err, ErrUnrepresentable):
			unrepresentable = append(unrepresentable, h.name)
		case err != nil:
			t.Fatalf("sourcetest: publish %s: %v", h.name, err)
		default:
			published++
		}
	}
	c.publish(t, valid[third:])
	c.waitApplied(t, len(valid))
	var rej []projection.RejectedEntry
	c.waitUntilf(t, func() string { return fmt.Sprintf("%d rejected deliveries (have %s)", published, rejectedSummary(rej)) }, func() (ok bool, err error) {
		rej, err = k.proc.Rejected(c.ctx, projection.ListOptions{Limit: 100})
		return len(rej) >= published, err
	})
	k.stop(t)
	checkFold(t, c.db.Pool, valid)
	rej, err := k.proc.Rejected(c.ctx, projection.ListOptions{Limit: 100})
	must(t, err)
	if len(rej) != published {
		t.Fatalf("sourcetest: %d hostile messages published, %d rejected: %s", published, len(rej), rejectedSummary(rej))
	}
	var reasons []string
	for _, e := range rej {
		reasons = append(reasons, e.Reason)
	}
	slices.Sort(reasons)
	t.Logf("rejected %d (%s); the source's envelope cannot carry: %s", len(rej), strings.Join(reasons, ", "), orNone(unrepresentable))
	if published == 0 {
		t.Fatal("sourcetest: the source could carry none of the hostile messages")
	}
}

func rejectedSummary(rej []projection.RejectedEntry) string {
	var s []string
	for _, e := range rej {
		s = append(s, fmt.Sprintf("%q v%d: %s", e.Aggregate, e.Version, e.Reason))
	}
	return "[" + strings.Join(s, "; ") + "]"
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

// gap: a transaction takes a low position and commits after later
// transactions did; its events are delivered all the same. A source may
// hold the later events back until it commits (a snapshot horizon) or
// deliver them first; a reader that went past the low position before it
// committed and never comes back fails.
func (r *runner) gap(t *testing.T, c *tcase) {
	k := c.newConsumer(t, "gap", startOptions{}).start(t)
	c.waitReady(t, k)
	held := stream(c.rng, "held-", 3, 1, 2)
	commit, err := c.Hold(c.ctx, held)
	must(t, err)
	later := stream(c.rng, "later-", 3, 1, 2)
	c.publish(t, later)
	// Give the reader the time to read past the held positions if it does
	// (a reader by position alone does, at once); a source that waits for
	// the slow transaction applies nothing meanwhile.
	settle, cancel := context.WithTimeout(c.ctx, gapSettle)
	first := c.applied(t)
	for first < len(later) && settle.Err() == nil {
		select {
		case <-c.progress:
		case <-settle.Done():
		}
		first = c.applied(t)
	}
	cancel()
	must(t, commit(c.ctx))
	marker := stream(c.rng, "marker-", 1, 1, 1)
	c.publish(t, marker)
	c.waitUntil(t, "the marker published after the late commit", func() (bool, error) {
		f, err := loadFold(c.ctx, c.db.Pool)
		return len(f["marker-000"].Versions) == 1, err
	})
	// A source that reads its partitions independently may apply the
	// marker (another partition) a moment before the held events and the
	// later ones: give them gapComeBack. A reader that went past them never
	// comes back.
	missing := func() (m *Message, wasHeld bool, err error) {
		got, err := loadFold(c.ctx, c.db.Pool)
		if err != nil {
			return nil, false, err
		}
		for i, m := range held {
			if !slices.Contains(got[m.Aggregate].Versions, m.Version) {
				return &held[i], true, nil
			}
		}
		for i, m := range later {
			if !slices.Contains(got[m.Aggregate].Versions, m.Version) {
				return &later[i], false, nil
			}
		}
		return nil, false, nil
	}
	deadline := time.Now().Add(gapComeBack)
	for {
		m, wasHeld, err := missing()
		must(t, err)
		if m == nil {
			break
		}
		if time.Now().After(deadline) {
			if wasHeld {
				// The marker is applied and the late commit's event is not:
				// the source read past its position before it committed and
				// will never come back to it.
				t.Fatalf("sourcetest: %s v%d, committed late at a low position, was skipped: events published after it are applied", m.Aggregate, m.Version)
			}
			t.Fatalf("sourcetest: %s v%d, published while a slow transaction held a lower position, was not applied within %v of the marker published after that commit", m.Aggregate, m.Version, gapComeBack)
		}
		select {
		case <-c.progress:
		case <-time.After(100 * time.Millisecond):
		}
	}
	k.stop(t)
	checkFold(t, c.db.Pool, slices.Concat(held, later, marker))
	t.Logf("%d of the %d later events were applied before the slow transaction committed", first, len(later))
}

// gapSettle is how long Gap lets a reader go past a held position.
const gapSettle = 2 * time.Second

// gapComeBack is how long after the marker is applied Gap waits for the
// held and the later events.
const gapComeBack = 5 * time.Second

func (c *tcase) waitReady(t testing.TB, k *consumer) {
	t.Helper()
	select {
	case <-k.ready:
	case <-c.ctx.Done():
		t.Fatal("sourcetest: the consumer did not become ready")
	}
}

// restart: the server restarts while the consumer runs; it carries on, and
// Run returns no error.
func (r *runner) restart(t *testing.T, c *tcase) {
	events := stream(c.rng, "restart-", 20, 1, 6)
	third := len(events) / 3
	k := c.newConsumer(t, "restart", startOptions{}).start(t)
	c.publish(t, events[:third])
	c.waitApplied(t, third/2)
	began := time.Now()
	must(t, c.Restart(c.ctx))
	t.Logf("server restarted in %v", time.Since(began).Round(time.Millisecond))
	c.publish(t, events[third:2*third])
	c.waitApplied(t, 2*third)
	must(t, c.Restart(c.ctx))
	c.publish(t, events[2*third:])
	c.waitApplied(t, len(events))
	select {
	case err := <-k.done:
		t.Fatalf("sourcetest: Run returned %v after the server restarted", err)
	default:
	}
	k.stop(t)
	checkFold(t, c.db.Pool, events)
	c.requireClean(t, k.proc)
}

// shareWaves and shareWavePause bound the waves of more work Share
// publishes while a process has applied nothing: 6 waves, 3 s.
const (
	shareWaves     = 6
	shareWavePause = 500 * time.Millisecond
)

// share: three processes consuming as one share the work (each takes some
// of it within a few seconds); one is SIGKILLed and the others take over
// its share.
func (r *runner) share(t *testing.T, c *tcase) {
	workers := []*child{c.spawn(t, "shared", "w1"), c.spawn(t, "shared", "w2"), c.spawn(t, "shared", "w3")}
	for _, w := range workers {
		w.waitReady(t, c.ctx)
	}
	first := stream(c.rng, "share-", r.f.Aggregates, 1, r.f.Versions/2)
	c.publish(t, first)
	c.waitApplied(t, len(first))
	got := checkFold(t, c.db.Pool, first)
	shares := func() map[string]int {
		by := map[string]int{}
		for _, row := range got {
			for _, w := range row.AppliedBy {
				by[w]++
			}
		}
		return by
	}
	idle := func(by map[string]int) *child {
		for _, w := range workers {
			if by[w.worker] == 0 {
				return w
			}
		}
		return nil
	}
	// A process ready but not yet served may get nothing of a first wave
	// the others apply at once: a NATS consumer that gets a new leader
	// (an election just after it was created) loses the pulls waiting on
	// it, and the client pulls again after two missed idle heartbeats,
	// about a second later. More work then, in waves over a few seconds:
	// every process must take a share of it.
	by := shares()
	for wave := 1; idle(by) != nil && wave <= shareWaves; wave++ {
		time.Sleep(shareWavePause)
		more := stream(c.rng, fmt.Sprintf("share%d-", wave), r.f.Aggregates, 1, 2)
		first = append(first, more...)
		c.publish(t, more)
		c.waitApplied(t, len(first))
		got = checkFold(t, c.db.Pool, first)
		by = shares()
		t.Logf("wave %d after an idle process: the work of %d events shared: %v", wave, len(first), by)
	}
	t.Logf("the work of %d events shared: %v", len(first), by)
	if w := idle(by); w != nil {
		t.Fatalf("sourcetest: %s applied nothing of %d events in %d waves over %v: the work is not shared (%v)",
			w.worker, len(first), shareWaves+1, shareWaves*shareWavePause, by)
	}
	// The aggregates the victim applied last: the share the others must
	// take over.
	victim := workers[0]
	owned := map[string]bool{}
	for agg, row := range got {
		if row.AppliedBy[len(row.AppliedBy)-1] == victim.worker {
			owned[agg] = true
		}
	}
	victim.kill(t)
	killed := time.Now()
	rest := stream(c.rng, "share-", r.f.Aggregates, r.f.Versions/2+1, r.f.Versions-r.f.Versions/2)
	c.publish(t, rest)
	var handover time.Duration
	c.waitUntil(t, "another process to apply an event of the killed one's share", func() (bool, error) {
		f, err := loadFold(c.ctx, c.db.Pool)
		for agg := range owned {
			if row := f[agg]; len(row.AppliedBy) > 0 && row.AppliedBy[len(row.AppliedBy)-1] != victim.worker {
				handover = time.Since(killed)
				return true, err
			}
		}
		return false, err
	})
	all := append(first, rest...)
	c.waitApplied(t, len(all))
	for _, w := range workers[1:] {
		w.stop(t)
	}
	checkFold(t, c.db.Pool, all)
	t.Logf("handover after SIGKILL: %v to the first commit of the killed process's share by another (%d aggregates)", handover.Round(time.Millisecond), len(owned))
}
