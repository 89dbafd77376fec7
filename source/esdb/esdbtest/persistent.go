package esdbtest

import (
	"time"

	"github.com/google/uuid"
)

// This file holds the persistent subscription groups' state and lifecycle.
// psdelivery.go has their delivery, acks and checkpoints, psservice.go the
// gRPC service.

const (
	strategyRoundRobin       = "RoundRobin"
	strategyDispatchToSingle = "DispatchToSingle"
	strategyPinned           = "Pinned"
	strategyPinnedByCorr     = "PinnedByCorrelation"

	// pinnedBuckets is how many buckets Pinned hashes streams into, like
	// EventStoreDB.
	pinnedBuckets = 1024
	// pinnedHold bounds the messages a Pinned group reads ahead and holds
	// for consumers that are full (EventStoreDB's buffers bound it too).
	pinnedHold = 10000
)

type psSettings struct {
	resolveLinks   bool
	maxRetry       int
	msgTimeout     time.Duration
	minCP, maxCP   int
	cpAfter        time.Duration
	maxSubscribers int
	strategy       string
}

type startKind int

const (
	startBeginning startKind = iota
	startEnd
	startAt // revision (stream) or commit position ($all), inclusive
)

// psGroup is a persistent subscription group. All fields are guarded by
// Server.mu. Source keys are revisions (stream) or log indexes ($all).
type psGroup struct {
	key       string // "<stream>::<group>", also the subscription id
	stream    string // "$all" for $all
	all       bool
	filter    *filter
	settings  psSettings
	startKind startKind
	startAt   uint64

	cursor      uint64               // next source key to read
	outstanding map[uuid.UUID]*psMsg // read but not finished: in flight or queued for retry
	byKey       map[uint64]bool      // the source keys of outstanding
	lastRead    *uint64              // key of the last source record read (GetInfo's last known event)
	low         uint64               // no key below it is outstanding (lowestUnfinished)
	retry       []*psMsg             // queued for (re)delivery, sorted by key
	held        []*psMsg             // Pinned: read, waiting for their consumer's room, in order
	heldIn      [pinnedBuckets]int32 // Pinned: how many of held are in each bucket
	consumers   []*psConsumer

	// Pinned's bucket assignments (pinned.go): the consumer of each bucket
	// (nil: unassigned), how many buckets are assigned, and how many
	// messages of each bucket are in flight.
	owner      [pinnedBuckets]*psConsumer
	assigned   int
	inflightIn [pinnedBuckets]int32
	rr         int // round robin index

	cp     *uint64 // checkpoint: source key to resume from after a restart
	cpBase uint64  // key of the last checkpoint (or the initial cursor)
	cpTime time.Time

	deleted bool
}

type psMsg struct {
	ev       resolved
	id       uuid.UUID // id of the original event: what clients ack
	key      uint64
	bucket   int // Pinned: the bucket of the resolved event's stream
	retry    int
	consumer *psConsumer // nil unless in flight
	timer    *time.Timer
	gen      uint64 // delivery generation, guards stale timeouts
}

type psConsumer struct {
	bufSize    int
	inflight   int
	buckets    int // Pinned: how many buckets are assigned to it
	waiting    int // Pinned: held messages of its buckets (deliverHeld's scratch)
	structured bool
	queue      []psDelivery  // to send, in order
	wake       chan struct{} // cap 1
	kicked     chan struct{} // closed by kick
	kickErr    error
}

// psDelivery is a message handed to a consumer, sent by its Read handler
// (which encodes it outside Server.mu).
type psDelivery struct {
	ev    resolved
	retry int
}

func (c *psConsumer) push(d psDelivery) {
	c.queue = append(c.queue, d)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *psConsumer) kick(err error) {
	if c.kickErr == nil {
		c.kickErr = err
		close(c.kicked)
	}
}

func (g *psGroup) parkedStream() string { return "$persistentsubscription-" + g.key + "-parked" }

func (g *psGroup) initialCursor(s *Server) uint64 {
	switch g.startKind {
	case startEnd:
		if g.all {
			return uint64(len(s.log))
		}
		if st := s.streams[g.stream]; st != nil {
			return uint64(len(st.events))
		}
		return 0
	case startAt:
		if g.all {
			return uint64(s.idxAtOrAfter(g.startAt))
		}
		return g.startAt
	default:
		return 0
	}
}

// reload resets the group like a node restart does: everything in flight
// or queued is forgotten and reading resumes from the checkpoint (or from
// the start option if no checkpoint was written yet).
func (g *psGroup) reload(s *Server) {
	g.stopTimers()
	g.outstanding = map[uuid.UUID]*psMsg{}
	g.byKey = map[uint64]bool{}
	g.lastRead = nil
	g.retry = nil
	g.held = nil
	g.heldIn = [pinnedBuckets]int32{}
	g.consumers = nil
	g.owner = [pinnedBuckets]*psConsumer{}
	g.assigned = 0
	g.inflightIn = [pinnedBuckets]int32{}
	g.rr = 0
	if g.cp != nil {
		g.cursor = *g.cp
	} else {
		g.cursor = g.initialCursor(s)
	}
	g.cpBase = g.cursor
	g.low = g.cursor
	g.cpTime = time.Now()
}

func (g *psGroup) stopTimers() {
	for _, m := range g.outstanding {
		if m.timer != nil {
			m.timer.Stop()
		}
	}
}
