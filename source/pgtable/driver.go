package pgtable

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/inorder/inorder/source"
)

// Driver returns the source's driver, for package cli (cli.Config.Sources):
// 'run --source postgres://host/db' reads the events table of that
// database, and '--source postgres' (no URL) the one in the processor's
// own database (--database-url). Its flags map a table of one's own
// (--pg-table, --pg-columns) and size the partitions.
func Driver() source.Driver { return driver{} }

type driver struct{}

func (driver) Schemes() []string { return []string{"postgres", "postgresql"} }
func (driver) Title() string     { return "PostgreSQL events table" }

type flags struct {
	fs           *pflag.FlagSet
	command      string
	Table        string
	Columns      string
	Partitions   int
	Channel      string
	PollInterval time.Duration
	LeaseEvery   time.Duration
}

func (driver) Bind(fs *pflag.FlagSet, command string) source.Opener {
	o := &flags{fs: fs, command: command}
	env := func(name, v string) { _ = fs.SetAnnotation(name, source.FlagEnvAnnotation, []string{v}) }
	fs.StringVar(&o.Table, "pg-table", "", "the events `table` ([schema.]name); default: inorder's own events table in --schema (see 'migrate')")
	env("pg-table", "INORDER_PG_TABLE")
	fs.StringVar(&o.Columns, "pg-columns", "", "the mapped table's `columns`, as key=column pairs separated by commas: seq, txid, aggregate, version, type, data, id, metadata, time (\"-\": none); unnamed keys keep the defaults of inorder's table")
	env("pg-columns", "INORDER_PG_COLUMNS")
	fs.IntVar(&o.Partitions, "pg-partitions", DefaultPartitions, "partitions of the aggregate space, read in order by one process each; must match the table's index (16 for inorder's table)")
	env("pg-partitions", "INORDER_PG_PARTITIONS")
	if command != "run" {
		return o
	}
	fs.StringVar(&o.Channel, "pg-channel", "", "LISTEN `channel` that wakes the readers (default inorder_events for inorder's table, none for a mapped one; - disables)")
	env("pg-channel", "INORDER_PG_CHANNEL")
	fs.DurationVar(&o.PollInterval, "pg-poll-interval", DefaultPollInterval, "how long a caught-up reader waits before reading again without a notification")
	env("pg-poll-interval", "INORDER_PG_POLL_INTERVAL")
	fs.DurationVar(&o.LeaseEvery, "pg-lease-every", DefaultLeaseEvery, "how often the processes balance the partitions' leases (bounds the handover after a process dies)")
	env("pg-lease-every", "INORDER_PG_LEASE_EVERY")
	return o
}

// table returns the Table the flags describe.
func (o *flags) table() (Table, error) {
	var t Table
	if o.Table != "" {
		if schema, name, ok := strings.Cut(o.Table, "."); ok {
			t.Schema, t.Name = schema, name
		} else {
			t.Name = o.Table
		}
	}
	if o.Columns == "" {
		return t, nil
	}
	fields := map[string]*string{"seq": &t.Seq, "txid": &t.TxID, "aggregate": &t.Aggregate, "version": &t.Version, "type": &t.Type,
		"data": &t.Data, "id": &t.ID, "metadata": &t.Metadata, "time": &t.Time}
	for _, kv := range strings.Split(o.Columns, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f := fields[k]
		if !ok || f == nil || v == "" {
			return t, fmt.Errorf("invalid --pg-columns entry %q: want key=column with key one of seq, txid, aggregate, version, type, data, id, metadata, time", kv)
		}
		*f = v
	}
	return t, nil
}

func (o *flags) Validate(url string) error {
	if _, err := o.table(); err != nil {
		return err
	}
	if o.Partitions < 1 || o.Partitions > 1024 {
		return fmt.Errorf("--pg-partitions must be between 1 and 1024")
	}
	if o.command == "run" && (o.PollInterval <= 0 || o.LeaseEvery <= 0) {
		return fmt.Errorf("--pg-poll-interval and --pg-lease-every must be positive")
	}
	return nil
}

// config returns the Config the flags, url and oc describe.
func (o *flags) config(url string, oc *source.OpenConfig) (*Config, error) {
	t, err := o.table()
	if err != nil {
		return nil, err
	}
	if !strings.Contains(url, "://") {
		url = oc.DatabaseURL // "postgres": the processor's database
	}
	return &Config{
		URL: url, Processor: oc.Processor, Name: oc.Name, Schema: oc.Schema, Table: t, Partitions: o.Partitions,
		Workers: oc.Workers, BatchSize: oc.BatchSize, MaxWait: oc.MaxWait, Channel: o.Channel,
		PollInterval: o.PollInterval, LeaseEvery: o.LeaseEvery, FromEnd: oc.FromEnd, DrainTimeout: oc.DrainTimeout,
		Logger: oc.Logger, OnReady: oc.OnReady,
	}, nil
}

func (o *flags) Open(_ context.Context, url string, oc *source.OpenConfig) (source.Feed, error) {
	cfg, err := o.config(url, oc)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// readConfig is config for a repair or a rebuild: with the table the
// workers recorded unless the mapping flags are given.
func (o *flags) readConfig(ctx context.Context, url string, oc *source.OpenConfig) (*Config, error) {
	cfg, err := o.config(url, oc)
	if err != nil {
		return nil, err
	}
	given := false
	for _, name := range []string{"pg-table", "pg-columns", "pg-partitions"} {
		if f := o.fs.Lookup(name); f != nil && f.Changed {
			given = true
		}
	}
	mine := recorded{Table: cfg.Table, Partitions: cfg.Partitions}
	if mine.Table.Schema == "" {
		mine.Table.Schema = cfg.Schema
	}
	r, err := readWith(ctx, oc.Processor, oc.Name, given, mine, oc.Note)
	if err != nil {
		return nil, err
	}
	cfg.Table, cfg.Partitions = r.Table, r.Partitions
	if cfg.Table == (Table{Schema: cfg.Schema}) {
		cfg.Table = Table{} // inorder's own
	}
	return cfg, nil
}

func (o *flags) Replayer(ctx context.Context, url string, oc *source.OpenConfig) (source.Replayer, error) {
	cfg, err := o.readConfig(ctx, url, oc)
	if err != nil {
		return nil, err
	}
	cfg.Processor = nil
	return NewReplayer(cfg)
}

func (o *flags) Repair(ctx context.Context, url string, oc *source.OpenConfig, opts *source.RepairOptions) ([]source.Repair, error) {
	cfg, err := o.readConfig(ctx, url, oc)
	if err != nil {
		return nil, err
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	return s.RepairNow(ctx, opts)
}
