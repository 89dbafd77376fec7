package generation

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the state of one side-by-side Build (build.go), which
// each of its steps advances.

// builder is one Build call.
type builder struct {
	env   *Env
	proj  Projection
	opts  Options
	start time.Time
	res   Result
	conn  *pgxpool.Conn // holds the build lock; the replay writes through it
	gen   store.Generation
	// gate is the gate of the new generation alone: the gate of the
	// replay's events that do not continue their aggregate.
	gate Target
	// feed is the catch-up's gate: it feeds every generation of the
	// projection that the processors of its code version feed — the new
	// one, and the live one when the code version did not change — in the
	// same transactions, as they do (see catchUpPass).
	feed Processor

	phase      string
	phaseStart time.Time
	phaseRead  int64
	fraction   func() float64
	lastShown  time.Time
}
