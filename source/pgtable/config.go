package pgtable

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Defaults of Config.
const (
	DefaultName            = "postgres"
	DefaultPartitions      = 16
	DefaultReadBatch       = 1000
	DefaultPollInterval    = 500 * time.Millisecond
	DefaultLeaseEvery      = time.Second
	DefaultCheckpointEvery = time.Second
	DefaultLagEvery        = 5 * time.Second
	DefaultDrainTimeout    = 30 * time.Second
	// DefaultChannel is the LISTEN channel of inorder's own events table
	// (migration 008): its trigger notifies it with the table's schema.
	DefaultChannel = "inorder_events"
)

// Table maps the columns of an events table. The zero Table is inorder's
// own events table (migration 008) in Config.Schema.
//
// A mapped table — an outbox, another event store's table — needs, besides
// an aggregate id, a version, a type and the data:
//
//   - Seq, a column that increases with every insert (an identity or
//     bigserial), and TxID, an xid8 column filled by the inserting
//     transaction: ALTER TABLE outbox ADD COLUMN txid xid8 NOT NULL DEFAULT
//     pg_current_xact_id(). The source orders by (TxID, Seq) and reads only
//     rows of transactions older than every transaction still running, so
//     a transaction that commits late is never skipped (see the package
//     documentation);
//   - an index on the order of each partition, for example with 16
//     partitions: CREATE INDEX ON outbox ((mod(hashtext(aggregate_id) &
//     2147483647, 16)), txid, seq) — with Config.Partitions 1, on (txid, seq);
//   - for wake-ups under polling's interval, a trigger that notifies
//     Config.Channel (AFTER INSERT … FOR EACH STATEMENT EXECUTE FUNCTION a
//     function calling pg_notify(channel, '<schema>')).
type Table struct {
	// Schema and Name name the table. Default: Config.Schema's "events".
	Schema, Name string
	// Seq and TxID are the position columns (see above). Defaults "seq"
	// and "txid".
	Seq, TxID string
	// Aggregate, Version, Type and Data are required columns (defaults
	// "aggregate", "version", "type", "data"); Data is json, jsonb or
	// text. ID is the event id column (default "id"; "-" for none: the id
	// is then "<aggregate>:<version>"); Metadata (json/jsonb/text) and
	// Time (timestamptz: when the row was written, for lag in seconds) are
	// optional ("-" for none; defaults "metadata" and "recorded_at").
	Aggregate, Version, Type, Data, ID, Metadata, Time string
}

// Config configures a Source. Processor is required, and Pool unless the
// events table is in the processor's database and URL names it.
type Config struct {
	// Pool connects to the database of the events table. Its connection
	// config also opens the source's two dedicated connections (LISTEN,
	// and the leases' advisory locks). Default: a pool on URL.
	Pool *pgxpool.Pool
	// URL is the events table's database, used when Pool is nil.
	URL string

	// Processor is the processor to feed; its checkpoints table keeps the
	// positions, written in each batch's transaction.
	Processor *projection.Processor

	// Name names the source: its checkpoint rows (<Name>/<partition>), its
	// leases and the source label of its metrics. Processes with the same
	// Name share the partitions. Default "postgres".
	Name string

	// Schema is the schema of inorder's own events table (Table's default).
	// Default: the processor's schema, or migrations.DefaultSchema.
	Schema string
	// Table maps the events table's columns; the zero value is inorder's
	// own.
	Table Table

	// Partitions is how many parts the aggregate space is cut into, by
	// mod(hashtext(aggregate) & 2147483647, Partitions): each is read in
	// order by one process at a time, which holds its lease, with its own
	// checkpoint; processes of one Name share them evenly. It must match
	// the table's index expression (16 for inorder's own table) and not
	// change while positions are stored. Default 16.
	Partitions int

	// Workers, BatchSize, MaxWait and MaxInFlight configure the dispatcher
	// (package source); defaults 4, 500, 50 ms and 3 × Workers × BatchSize.
	Workers, BatchSize int
	MaxWait            time.Duration
	MaxInFlight        int

	// ReadBatch is how many rows one read of a partition fetches. Default
	// 1000.
	ReadBatch int
	// Channel is the LISTEN channel whose notifications wake the readers;
	// a notification's payload, when not empty, must be the table's
	// schema. Default DefaultChannel for inorder's own table, none for a
	// mapped one; "-" disables listening.
	Channel string
	// PollInterval is how long a caught-up reader waits before it reads
	// again without a notification (and how long after the last
	// transaction older than the newest rows ends). Default 500 ms.
	PollInterval time.Duration
	// LeaseEvery is how often the leases are balanced: a process takes
	// partitions nobody holds (a dead process's, whose locks PostgreSQL
	// released with its connection) and gives up those beyond its share.
	// It bounds the handover after a process dies. Default 1 s.
	LeaseEvery time.Duration
	// CheckpointEvery is how often a partition's position is saved when it
	// moved past what its batches wrote (batches committing out of
	// order). Default 1 s.
	CheckpointEvery time.Duration
	// LagEvery is how often Run measures the lag, and looks for a
	// transaction holding back the snapshot horizon; negative disables
	// both. Default 5 s.
	LagEvery time.Duration
	// HorizonWarnAfter is how long a transaction may hold back the
	// snapshot horizon, while committed events wait behind it, before the
	// source reports it: a warning naming its pid, Source.Blocker, and
	// inorder_source_horizon_blocked_seconds. Default 10 s.
	HorizonWarnAfter time.Duration
	// FromEnd starts partitions without a checkpoint at the end of the
	// table instead of its start.
	FromEnd bool
	// DrainTimeout bounds a graceful stop. Default 30 s.
	DrainTimeout time.Duration

	// Logger receives the source's logs. Default: discarded.
	Logger *slog.Logger
	// OnReady, if set, is called once this process first holds its share
	// of the partitions and reads them.
	OnReady func()

	// sequenceOnly reads by Seq alone, without the snapshot bound: the
	// skipping reader the tests show to fail.
	sequenceOnly bool
}

// config is a Config with defaults applied and SQL built.
type config struct {
	Config
	own     bool   // inorder's own table
	table   string // quoted
	channel string // "" for none
	schema  string // the table's schema, for notifications
	cols    columns
	readSQL string
	// order is the read order, (TxID, Seq), by qualified columns.
	order string
	// pendingSQL tells whether a partition has committed rows after a
	// position that readers do not see yet: rows of transactions younger
	// than one still running.
	pendingSQL string
	endSQL     string
	byAggSQL   string
	ownPool    bool
}

type columns struct {
	seq, txid, agg, version, typ, data, id, meta, time, part string
}

func newConfig(cfg *Config, needProcessor bool) (*config, error) {
	if cfg == nil {
		return nil, errors.New("pgtable: nil Config")
	}
	c := &config{Config: *cfg}
	if needProcessor && c.Processor == nil {
		return nil, errors.New("pgtable: Config.Processor is required")
	}
	if c.Pool == nil && c.URL == "" {
		return nil, errors.New("pgtable: Config.Pool or URL is required")
	}
	if c.Partitions < 0 || c.Workers < 0 || c.BatchSize < 0 || c.ReadBatch < 0 || c.PollInterval < 0 || c.LeaseEvery < 0 || c.CheckpointEvery < 0 || c.DrainTimeout < 0 || c.HorizonWarnAfter < 0 {
		return nil, errors.New("pgtable: negative Partitions, Workers, BatchSize, ReadBatch or interval")
	}
	c.Name = cmp.Or(c.Name, DefaultName)
	c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
	if c.Partitions > 1024 {
		return nil, errors.New("pgtable: Partitions above 1024")
	}
	c.Workers = cmp.Or(c.Workers, source.DefaultWorkers)
	c.BatchSize = cmp.Or(c.BatchSize, source.DefaultBatchSize)
	c.ReadBatch = cmp.Or(c.ReadBatch, DefaultReadBatch)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.LeaseEvery = cmp.Or(c.LeaseEvery, DefaultLeaseEvery)
	c.CheckpointEvery = cmp.Or(c.CheckpointEvery, DefaultCheckpointEvery)
	c.LagEvery = cmp.Or(c.LagEvery, DefaultLagEvery)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.HorizonWarnAfter = cmp.Or(c.HorizonWarnAfter, DefaultHorizonWarnAfter)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Schema == "" && c.Processor != nil {
		c.Schema = c.Processor.Schema()
	}
	c.Schema = cmp.Or(c.Schema, migrations.DefaultSchema)
	t := c.Table
	c.own = t == (Table{})
	opt := func(v, def string) string {
		if v == "-" {
			return ""
		}
		return cmp.Or(v, def)
	}
	t.Schema = cmp.Or(t.Schema, c.Schema)
	t.Name = cmp.Or(t.Name, "events")
	q := func(col string) string {
		if col == "" {
			return ""
		}
		return pgx.Identifier{col}.Sanitize()
	}
	c.cols = columns{
		seq: q(cmp.Or(t.Seq, "seq")), txid: q(cmp.Or(t.TxID, "txid")), agg: q(cmp.Or(t.Aggregate, "aggregate")),
		version: q(cmp.Or(t.Version, "version")), typ: q(cmp.Or(t.Type, "type")), data: q(cmp.Or(t.Data, "data")),
		id: q(opt(t.ID, "id")), meta: q(opt(t.Metadata, "metadata")), time: q(opt(t.Time, "recorded_at")),
	}
	for _, s := range []string{t.Schema, t.Name} {
		if strings.ContainsRune(s, 0) {
			return nil, fmt.Errorf("pgtable: invalid table name %q", s)
		}
	}
	c.schema = t.Schema
	c.table = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	switch {
	case c.Channel == "-":
		c.channel = ""
	case c.Channel != "":
		c.channel = c.Channel
	case c.own:
		c.channel = DefaultChannel
	}
	c.buildSQL()
	return c, nil
}

// fields are the columns of a read, in scanRows' order.
func (c *config) fields() string {
	k := c.cols
	or := func(col, cast, def string) string {
		if col == "" {
			return def
		}
		return col + cast
	}
	return fmt.Sprintf(`%s::text, %s, coalesce(%s, ''), coalesce(%s::text, ''), coalesce(%s::bigint, 0), coalesce(%s::text, ''), coalesce(%s::text, ''), %s, %s`,
		k.txid, k.seq, or(k.id, "::text", "''"), k.agg, k.version, k.typ, k.data, or(k.meta, "::text", "NULL::text"), or(k.time, "::timestamptz", "NULL::timestamptz"))
}

// buildSQL builds the statements the source runs.
func (c *config) buildSQL() {
	k := c.cols
	// The partition of a row: the expression of the table's index.
	k.part = fmt.Sprintf("mod(hashtext(%s) & 2147483647, %d)", k.agg, c.Partitions)
	c.cols.part = k.part
	fields := c.fields()
	where := fmt.Sprintf(`(%s, %s) > ($1::text::xid8, $2::bigint)`, k.txid, k.seq)
	if c.Partitions > 1 {
		where = k.part + ` = $4 AND ` + where
	}
	// The read order, by the table's own columns: a bare name in ORDER BY
	// would name the output column of that name first — fields' txid::text
	// — and rows would come in text order, where "100002" sorts before
	// "99965": the reader would pass (and skip for ever) every row of a
	// transaction whose id has fewer digits.
	c.order = c.table + "." + k.txid + ", " + c.table + "." + k.seq
	order := c.order
	if c.sequenceOnly {
		// By position alone, as a poller of "seq > last" does.
		where = fmt.Sprintf(`%s > $2::bigint AND $1::text IS NOT NULL`, k.seq)
		if c.Partitions > 1 {
			where = k.part + ` = $4 AND ` + where
		}
		order = c.table + "." + k.seq
	} else {
		where += fmt.Sprintf(` AND %s < pg_snapshot_xmin(pg_current_snapshot())`, k.txid)
	}
	c.readSQL = fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT $3`, fields, c.table, where, order)
	pending := fmt.Sprintf(`(%s, %s) > ($1::text::xid8, $2::bigint)`, k.txid, k.seq)
	if c.Partitions > 1 {
		pending = k.part + ` = $3 AND ` + pending
	}
	c.pendingSQL = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s)`, c.table, pending)
	// The end of a partition: its last row that every reader sees.
	endWhere := k.txid + ` < pg_snapshot_xmin(pg_current_snapshot())`
	if c.Partitions > 1 {
		endWhere = k.part + ` = $1 AND ` + endWhere
	}
	c.endSQL = fmt.Sprintf(`SELECT %s::text, %s FROM %s WHERE %s ORDER BY %s.%s DESC, %s.%s DESC LIMIT 1`, k.txid, k.seq, c.table, endWhere, c.table, k.txid, c.table, k.seq)
	c.byAggSQL = fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1 AND %s BETWEEN $2 AND $3 AND %s < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY %s`,
		fields, c.table, k.agg, k.version, k.txid, c.order)
}
