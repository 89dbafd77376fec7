package projection

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// This file holds the one set of operator view types: what the processor's
// listings return, what the CLI prints with --json and what the HTTP API
// sends, unchanged. Their JSON field names are stable. Beside the operator
// log's entry as read is the entry as written (Action).

// Payload is an event's data or metadata as operators see it. Its JSON form
// is the payload itself when it is valid JSON, and {"base64": "…"} (the
// standard encoding) otherwise — an envelope rejected for invalid JSON, say.
// A nil Payload is JSON null.
type Payload []byte

// String returns the payload as operators read it in a table: its JSON on
// one line when it is valid JSON, else "base64:" and the standard encoding
// of its bytes; "" when nil.
func (p Payload) String() string {
	switch {
	case p == nil:
		return ""
	case json.Valid(p):
		var b bytes.Buffer
		if json.Compact(&b, p) == nil {
			return b.String()
		}
	}
	return "base64:" + base64.StdEncoding.EncodeToString(p)
}

// MarshalJSON implements json.Marshaler.
func (p Payload) MarshalJSON() ([]byte, error) {
	switch {
	case p == nil:
		return []byte("null"), nil
	case json.Valid(p):
		var b bytes.Buffer
		err := json.Compact(&b, p) // one line, whatever the source sent
		return b.Bytes(), err
	default:
		return json.Marshal(struct {
			Base64 string `json:"base64"`
		}{base64.StdEncoding.EncodeToString(p)})
	}
}

// UnmarshalJSON implements json.Unmarshaler: the inverse of MarshalJSON.
func (p *Payload) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*p = nil
		return nil
	}
	var wrapped map[string]json.RawMessage
	if json.Unmarshal(b, &wrapped) == nil && len(wrapped) == 1 {
		if raw, ok := wrapped["base64"]; ok {
			var s string
			if err := json.Unmarshal(raw, &s); err == nil {
				d, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return errors.New("projection: payload: invalid base64")
				}
				*p = d
				return nil
			}
		}
	}
	*p = append((*p)[:0], b...)
	return nil
}

// Position is a source's position in its stream, as the source encodes it:
// opaque to the processor, which only compares positions as byte strings
// (a checkpoint never moves to a smaller one). Its JSON form is the text
// itself when it is printable ASCII, else "0x" and its hex digits.
type Position []byte

// String returns the position's text form (see Position).
func (p Position) String() string {
	for _, c := range p {
		if c < 0x20 || c > 0x7e {
			return "0x" + hex.EncodeToString(p)
		}
	}
	return string(p)
}

// MarshalJSON implements json.Marshaler.
func (p Position) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON implements json.Unmarshaler: the inverse of MarshalJSON.
func (p *Position) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("projection: position: %w", err)
	}
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		d, err := hex.DecodeString(h)
		if err != nil {
			return fmt.Errorf("projection: position: %w", err)
		}
		*p = d
		return nil
	}
	*p = Position(s)
	return nil
}

// Status is the operator summary of a processor's schema: every projection's
// gate state, the sources' checkpoints and the rejected deliveries. The
// CLI's status command, GET /v1/status and the metrics' gauges show it.
type Status struct {
	// Time is when the status was read, by the database's clock.
	Time time.Time `json:"time"`
	// TotalsAt is when the totals (ProjectionStatus.Aggregates and Events,
	// Generation.Applied) were read, by the database's clock: Time, unless
	// StatusOptions.TotalsMaxAge let them be older; zero with NoTotals.
	TotalsAt time.Time `json:"totals_at,omitzero"`
	// Projections has one entry per projection of the processor, in the
	// order of Processor.Projections.
	Projections []ProjectionStatus `json:"projections"`
	// Checkpoints are the sources' stored positions, by name.
	Checkpoints []Checkpoint `json:"checkpoints"`
	// Rejected counts rejected deliveries.
	Rejected RejectedCounts `json:"rejected"`
	// Generations lists the generations of the processor's projections that
	// exist (not dropped): their state, phase, position, lag and the events
	// applied in each.
	Generations []Generation `json:"generations"`
	// Others lists the projections the schema holds state of that the
	// processor does not have (another binary's): a schema that holds only
	// those shows the processor's projections empty.
	Others []string `json:"others"`
	// Attention lists the oldest entries that wait for an operator, at most
	// StatusEntries of each kind, payloads omitted.
	Attention Attention `json:"attention"`
}

// StatusEntries is how many entries of each kind Status.Attention lists.
const StatusEntries = 10

// Attention lists what waits for an operator: quarantined events, open
// (unacknowledged) conflicts and rejected deliveries not replayed. The
// slices are never nil.
type Attention struct {
	Quarantined []QuarantineEntry `json:"quarantined"`
	Conflicts   []ConflictEntry   `json:"conflicts"`
	Rejected    []RejectedEntry   `json:"rejected"`
}

// ProjectionStatus summarises the gate state of one projection.
type ProjectionStatus struct {
	// Name is the projection's name.
	Name string `json:"name"`
	// Aggregates counts the aggregates the projection has seen, applied or
	// not.
	Aggregates int64 `json:"aggregates"`
	// Events is the sum of the applied versions: the events applied (or
	// skipped by an operator) over all aggregates. It saturates at the
	// largest int64.
	Events int64 `json:"events"`
	// Parked counts parked events, ParkedAggregates the aggregates that have
	// some, and OldestParked is when the oldest of them was parked (zero if
	// none), OldestParkedAge how long ago, by the database's clock
	// (OldestParkedAgeSeconds in JSON).
	Parked                 int64         `json:"parked"`
	ParkedAggregates       int64         `json:"parked_aggregates"`
	OldestParked           time.Time     `json:"oldest_parked,omitzero"`
	OldestParkedAge        time.Duration `json:"-"`
	OldestParkedAgeSeconds float64       `json:"oldest_parked_age_seconds"`
	// Quarantined counts quarantined events (at most one per aggregate).
	Quarantined int64 `json:"quarantined"`
	// Conflicts counts recorded conflicts that no operator acknowledged
	// (distinct conflicting events, not their deliveries);
	// ConflictsAcknowledged those that one did.
	Conflicts             int64 `json:"conflicts"`
	ConflictsAcknowledged int64 `json:"conflicts_acknowledged"`
	// Owner is the lease of the process that owns the live generation's
	// gate key (Config.Owner, docs/owner.md); nil when none does.
	Owner *Lease `json:"owner,omitempty"`
}

// Lease is a fenced owner's lease on a projection's gate key (Config.Owner).
type Lease struct {
	// Holder names the owning process: its host name and process id.
	Holder string `json:"holder"`
	// Token grows with every new owner of the key.
	Token int64 `json:"token"`
	// TakenAt is when the holder took the lease.
	TakenAt time.Time `json:"taken_at"`
	// OtherWrites counts the transactions of other writers (processes
	// without the lease, operators' actions, the owner's own batches that
	// overlapped) since the key was first owned: each makes the owner read
	// its memory again. One that keeps growing means competing writers the
	// owner waits on.
	OtherWrites int64 `json:"other_writes"`
}

// Checkpoint is a source's stored position (see Batch.Checkpoint).
type Checkpoint struct {
	// Name identifies the source's subscription.
	Name string `json:"name"`
	// Position is where the source stands, in its own encoding.
	Position Position `json:"position"`
	// UpdatedAt is when the position last moved.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Age is the time since UpdatedAt by the database's clock
	// (AgeSeconds in JSON). It grows while nothing is delivered, lag or
	// not: sources export their own lag.
	Age        time.Duration `json:"-"`
	AgeSeconds float64       `json:"age_seconds"`
}

// RejectedCounts counts the rejected table's entries: Total of them, of
// which Pending are not resolved (replayed, dismissed or declared
// missing).
type RejectedCounts struct {
	Total   int64 `json:"total"`
	Pending int64 `json:"pending"`
}

// ParkedEntry is a parked event: a future version waiting for the versions
// before it.
type ParkedEntry struct {
	Projection string `json:"projection"`
	// Generation is the projection's generation the row belongs to (see
	// Processor.Generations): the live one unless the listing asked for
	// another (ListOptions.Generation, AllGenerations).
	Generation int    `json:"generation"`
	Aggregate  string `json:"aggregate"`
	Version    int64  `json:"version"`
	EventID    string `json:"event_id"`
	Type       string `json:"type"`
	// Data and Metadata are nil when the listing omitted payloads.
	Data     Payload   `json:"data,omitempty"`
	Metadata Payload   `json:"metadata,omitempty"`
	ParkedAt time.Time `json:"parked_at"`
	// Current is the aggregate's applied version: the event waits for
	// versions Current+1 … Version-1.
	Current int64 `json:"current"`
}

// WaitingEntry is an aggregate with parked events.
type WaitingEntry struct {
	Projection string `json:"projection"`
	// Generation is the projection's generation the row belongs to (see
	// Processor.Generations): the live one unless the listing asked for
	// another (ListOptions.Generation, AllGenerations).
	Generation int    `json:"generation"`
	Aggregate  string `json:"aggregate"`
	// Current is the applied version; the aggregate waits for Current+1.
	Current int64 `json:"current"`
	// Parked is how many events are parked; MinVersion and MaxVersion bound
	// their versions.
	Parked     int64 `json:"parked"`
	MinVersion int64 `json:"min_version"`
	MaxVersion int64 `json:"max_version"`
	// MissingFrom and MissingTo bound the versions it waits for:
	// Current+1 … MinVersion-1. MissingTo < MissingFrom means it waits for
	// nothing: its next version is parked and was not drained, a state the
	// gate does not leave but an owner of a release before 6 Dec could
	// (docs/owner.md); Current is an inline projection's row version when
	// that is later than its version row's.
	MissingFrom int64 `json:"missing_from"`
	MissingTo   int64 `json:"missing_to"`
	// Oldest is when the oldest of its parked events was parked.
	Oldest time.Time `json:"oldest"`
}

// QuarantineEntry is a quarantined event: the one event of an aggregate
// whose handler failed for good, with the last error.
type QuarantineEntry struct {
	Projection string `json:"projection"`
	// Generation is the projection's generation the row belongs to (see
	// Processor.Generations): the live one unless the listing asked for
	// another (ListOptions.Generation, AllGenerations).
	Generation int    `json:"generation"`
	Aggregate  string `json:"aggregate"`
	Version    int64  `json:"version"`
	// EventID is the event's stable id.
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// Data and Metadata are nil when the listing omitted payloads.
	Data     Payload `json:"data,omitempty"`
	Metadata Payload `json:"metadata,omitempty"`
	// Error is the handler's last error.
	Error string `json:"error"`
	// Attempts counts the handler calls that failed on the event, operator
	// retries included.
	Attempts      int       `json:"attempts"`
	QuarantinedAt time.Time `json:"quarantined_at"`
	LastAttemptAt time.Time `json:"last_attempt_at"`
}

// ConflictEntry is a recorded conflict: deliveries of an (aggregate, version)
// whose id or payload differ from the event that holds that version.
type ConflictEntry struct {
	ID         int64  `json:"id"`
	Projection string `json:"projection"`
	// Generation is the projection's generation the row belongs to (see
	// Processor.Generations): the live one unless the listing asked for
	// another (ListOptions.Generation, AllGenerations).
	Generation int    `json:"generation"`
	Aggregate  string `json:"aggregate"`
	Version    int64  `json:"version"`
	// ExistingState says what holds the version: "applied", "parked",
	// "quarantined", "delivery" (an earlier delivery of the same batch) or
	// "skipped" (declared missing by an operator: no event holds it, and
	// the existing id and hash are empty). A version an operator skipped
	// is held by the skipped event, "applied".
	ExistingState   string `json:"existing_state"`
	ExistingEventID string `json:"existing_event_id"`
	ExistingHash    []byte `json:"existing_hash"`
	// IncomingEventID, IncomingHash, Type, Data and Metadata describe the
	// conflicting delivery (Data and Metadata are nil when the listing
	// omitted payloads).
	IncomingEventID string  `json:"incoming_event_id"`
	IncomingHash    []byte  `json:"incoming_hash"`
	Type            string  `json:"type"`
	Data            Payload `json:"data,omitempty"`
	Metadata        Payload `json:"metadata,omitempty"`
	// Count is how many times it was delivered.
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// AcknowledgedAt is when an operator acknowledged it (zero if not), with
	// AckReason.
	AcknowledgedAt time.Time `json:"acknowledged_at,omitzero"`
	AckReason      string    `json:"ack_reason,omitempty"`
}

// RejectedEntry is a delivery that failed validation. Its fields hold what
// was delivered, which may be empty or invalid: text fields that are not
// valid UTF-8 or hold NUL bytes are shown with those bytes escaped (\xNN),
// and the delivery's exact bytes are kept for ReplayRejected.
type RejectedEntry struct {
	// ID identifies the entry for Processor.ReplayRejected.
	ID int64 `json:"id"`
	// Fingerprint identifies the delivery: the hash of what was delivered
	// (event id, aggregate, version, type, content type, data, metadata),
	// whatever its source and error. Deliveries of the same event share
	// one entry, whichever path — a worker, a repair, a replay — they came
	// by.
	Fingerprint []byte `json:"fingerprint"`
	Source      string `json:"source"`
	EventID     string `json:"event_id"`
	Aggregate   string `json:"aggregate"`
	Version     int64  `json:"version"`
	Type        string `json:"type"`
	// ContentType is the content type the source gave for the data, if any.
	ContentType string `json:"content_type,omitempty"`
	// Data and Metadata are nil when the listing omitted payloads.
	Data     Payload `json:"data,omitempty"`
	Metadata Payload `json:"metadata,omitempty"`
	// Size is the length of the delivered data in bytes (also when Data
	// was omitted).
	Size int64 `json:"size"`
	// Reason is the stable code of the validation error
	// (aggregate.Reason), Error its text.
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// Count is how many times it was delivered.
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// ReplayedAt is when an operator replayed it successfully (zero if
	// never).
	ReplayedAt time.Time `json:"replayed_at,omitzero"`
	// ResolvedAt is when it stopped waiting for an operator (zero: it is
	// pending): Resolution says how — "replayed", "dismissed", or
	// "declared-gap" (its version was declared missing, or skipped) —
	// ResolvedBy who and ResolveReason why.
	ResolvedAt    time.Time `json:"resolved_at,omitzero"`
	Resolution    string    `json:"resolution,omitempty"`
	ResolvedBy    string    `json:"resolved_by,omitempty"`
	ResolveReason string    `json:"resolve_reason,omitempty"`
}

// Action is an entry for the operator log (see Processor.LogAction).
type Action struct {
	// Action names what was done or found, e.g. "gap-missing-at-source".
	Action     string
	Projection string
	// Generation is the projection's generation concerned (0: none, or
	// not known).
	Generation int
	Aggregate  string
	// From and To are the versions concerned, if any.
	From, To *int64
	Reason   string
	// By names who acted (see ActionOptions.By); empty for a source's
	// finding.
	By string
	// Once records the entry only if no entry with the same action,
	// projection, generation, aggregate and versions exists: for findings a
	// source makes again each time it looks.
	Once bool
}

// OperatorLogEntry is one recorded operator decision or source finding.
type OperatorLogEntry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Action names what was done: "retry", "skip", "declare-gap",
	// "replay-rejected", "ack-conflict", "rebuild-start", "rebuild-done",
	// "gap-missing-at-source", …
	Action     string `json:"action"`
	Projection string `json:"projection,omitempty"`
	// Generation is the projection's generation the action concerned (0:
	// none, or not recorded).
	Generation int    `json:"generation,omitempty"`
	Aggregate  string `json:"aggregate,omitempty"`
	// From and To are the versions the action concerns, when it has them.
	From   *int64 `json:"from,omitempty"`
	To     *int64 `json:"to,omitempty"`
	Reason string `json:"reason,omitempty"`
	// By names who acted (ActionOptions.By), if anyone said.
	By string `json:"by,omitempty"`
}

// escapeText returns s as Postgres text can hold it and an operator can read
// it: valid UTF-8 without NUL bytes is returned as is; otherwise every
// invalid byte, every NUL and every backslash is written \xNN. ok is false
// when s had to be escaped.
func escapeText(s string) (escaped string, ok bool) {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && n <= 1) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s, true
	}
	const digits = "0123456789abcdef"
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0, r == utf8.RuneError && n <= 1, r == '\\':
			out = append(out, '\\', 'x', digits[s[i]>>4], digits[s[i]&15])
			i++
		default:
			out = append(out, s[i:i+n]...)
			i += n
		}
	}
	return string(out), false
}

// AggregateState is the gate state of one aggregate in one projection.
type AggregateState struct {
	Projection string `json:"projection"`
	// Generation is the projection's generation the row belongs to (see
	// Processor.Generations): the live one unless the listing asked for
	// another (ListOptions.Generation, AllGenerations).
	Generation int    `json:"generation"`
	Aggregate  string `json:"aggregate"`
	// Version is the last applied version.
	Version int64 `json:"version"`
	// Parked counts the aggregate's parked events.
	Parked int64 `json:"parked"`
	// Quarantined tells whether an event of the aggregate is quarantined
	// (its later versions then park behind it).
	Quarantined bool `json:"quarantined"`
}

// AppliedEntry is one version in a projection's applied log: the id and
// payload hash of the event applied as that version, which tell a
// redelivery (a duplicate) from a conflicting event.
type AppliedEntry struct {
	Projection string `json:"projection"`
	// Generation is the projection's generation the row belongs to (see
	// Processor.Generations): the live one unless the listing asked for
	// another (ListOptions.Generation, AllGenerations).
	Generation int    `json:"generation"`
	Aggregate  string `json:"aggregate"`
	Version    int64  `json:"version"`
	EventID    string `json:"event_id"`
	Hash       []byte `json:"hash"`
	// Entry is, for the recent versions of an inline projection (see
	// Inline), the entry of the row's log (InlineEntry), which stands for
	// the event's id and hash: EventID and Hash are then empty.
	Entry []byte `json:"entry,omitempty"`
}

// Generation is one generation of a projection, as operators see it.
type Generation struct {
	Projection string `json:"projection"`
	// Generation numbers the projection's generations from 1.
	Generation int `json:"generation"`
	// CodeVersion is the projection's code version that builds and feeds
	// it (see Description.Version).
	CodeVersion int `json:"code_version"`
	// Key is the projection column of its gate rows (the projection's name
	// for generation 1, "<name>@<n>" after).
	Key string `json:"key"`
	// Schema holds its read-model tables; empty for generation 1, whose
	// tables are in the connection's search_path.
	Schema string `json:"schema,omitempty"`
	// State is one of StateBuilding, StateCatchUp, StateLive,
	// StatePrevious, StateFailed, StateRetired, StateDropped.
	State string `json:"state"`
	// Phase refines State while a rebuild works on it: PhaseReplay,
	// PhaseFinalize, PhaseCatchUp, PhaseVerify, PhaseSwitch.
	Phase string `json:"phase,omitempty"`
	// Position is how far the rebuild read the stream (the source's
	// position, opaque), PositionTime the source's time of the event
	// there, Events how many events the rebuild read (0 for a generation
	// no rebuild built: see Applied).
	Position     Position  `json:"position,omitempty"`
	PositionTime time.Time `json:"position_time,omitzero"`
	Events       int64     `json:"events"`
	// Applied is the events applied in the generation — the sum of its
	// aggregates' versions, as ProjectionStatus.Events — whoever applied
	// them (its rebuild or the workers). Status and Generations set it
	// (nil for a dropped generation, or when its rows could not be read).
	Applied *int64 `json:"applied,omitempty"`
	// Lag is, while the generation is built, the age of the last event the
	// rebuild read (now - PositionTime): how far behind the stream it is.
	// Zero otherwise: the workers' lag is the source's to report.
	Lag        time.Duration `json:"-"`
	LagSeconds float64       `json:"lag_seconds"`
	// Error says why verification failed (StateFailed).
	Error string `json:"error,omitempty"`
	// KeepUntil is when a previous generation stops being fed (retired).
	KeepUntil time.Time `json:"keep_until,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// LiveAt is when it was last switched in; EndedAt when it stopped being
	// fed for good (failed, retired, dropped).
	LiveAt  time.Time `json:"live_at,omitzero"`
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// setLag computes Lag as of now.
func (g *Generation) setLag(now time.Time) {
	g.Lag, g.LagSeconds = 0, 0
	if (g.State == StateBuilding || g.State == StateCatchUp) && !g.PositionTime.IsZero() {
		g.Lag = max(now.Sub(g.PositionTime), 0)
		g.LagSeconds = g.Lag.Seconds()
	}
}

// Generation states (the generations table's state column; see
// migrations/sql/005_generations.up.sql).
const (
	// StateBuilding: replayed from the start of the stream, in bulk, by
	// one rebuilder; fed by nobody else.
	StateBuilding = "building"
	// StateCatchUp: built, then fed by the rebuilder up to the stream's end
	// and by every processor of its code version; verified, then switched
	// in.
	StateCatchUp = "catchup"
	// StateLive: the generation readers, the HTTP API and operator tools
	// use; fed by the processors of its code version. Exactly one per
	// projection.
	StateLive = "live"
	// StatePrevious: the live generation before the last switch or
	// rollback: still fed, so that a rollback is instant and exact, until
	// its retention ends.
	StatePrevious = "previous"
	// StateFailed: did not pass verification; kept for inspection, fed by
	// nobody.
	StateFailed = "failed"
	// StateRetired: no longer fed (a previous generation past its
	// retention); dropped by the next rebuild or by an operator.
	StateRetired = "retired"
	// StateDropped: its tables and gate rows are gone.
	StateDropped = "dropped"
)
