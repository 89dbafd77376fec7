package projection

import (
	"context"
	"time"

	"github.com/inorder/inorder/aggregate"
)

// Stream is a source's history as a side-by-side rebuild reads it (see
// Processor.Build): in order, from a position, up to the end. Package
// source/esdb's Replayer is one, over EventStoreDB's $all.
type Stream interface {
	// Read reads the stream in order, from right after position from (from
	// its start when from is nil) up to its end at the time of the call,
	// and calls fn with consecutive batches of mapped events from one
	// goroutine, waiting for each call to return. Each batch's Position is
	// that of the last record read for it, records that are not events for
	// the projections included: a Read from that position continues right
	// after it. The first error of fn stops Read, which returns it.
	Read(ctx context.Context, from Position, fn func(ctx context.Context, b StreamBatch) error) error
}

// StreamBatch is a run of consecutive records of a Stream.
type StreamBatch struct {
	// Events are the records that are events for the projections, mapped,
	// in stream order. Invalid envelopes are passed on: the rebuild records
	// them as rejected, as the workers do.
	Events []aggregate.Event
	// Rejects are records the source could not turn into valid events
	// (content that is not JSON, say), with their errors: the rebuild
	// records them as rejected, as the workers do.
	Rejects []Reject
	// Read counts the records read for the batch: Events and the records
	// that are not for the projections (other streams, system events).
	Read int64
	// Position is the position of the batch's last record.
	Position Position
	// Time is when the source recorded the batch's last record; zero when
	// it does not say.
	Time time.Time
}

// StreamProgress is implemented by Streams that can tell how far a running
// Read is: Fraction returns the share of the records from its start to its
// end already read, from 0 to 1. It must be safe to call from any
// goroutine. The rebuild's progress reports and ETA use it.
type StreamProgress interface {
	Fraction() float64
}
