package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"strings"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// rebuildOptions configures rebuild.
type rebuildOptions struct {
	log        clikit.LogOptions
	db         clikit.DBOptions
	es         esdbOptions
	out        clikit.OutputOptions
	a          *App
	Workers    int
	BatchSize  int
	Projection string
	Yes        bool
}

func (o *rebuildOptions) validate(args []string) error {
	name, err := clikit.OneArg(args, "projection")
	if err != nil {
		return err
	}
	if o.Projection, err = o.a.pickProjection(name); err != nil {
		return err
	}
	for _, v := range []interface{ Validate() error }{&o.log, &o.db, &o.es} {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	if o.Workers < 1 {
		return clikit.Usagef("--workers must be at least 1")
	}
	if o.BatchSize < 1 {
		return clikit.Usagef("--batch-size must be at least 1")
	}
	if !o.Yes && !o.a.Terminal() {
		return clikit.Usagef("rebuild deletes the read model of %s: pass --yes to confirm (there is no terminal to ask on)", o.Projection)
	}
	return nil
}

// rebuildCmd rebuilds a projection from the stream.
type rebuildCmd struct{ a *App }

func (c *rebuildCmd) command() *cobra.Command {
	return leaf("rebuild <projection>", "drop a projection's read model and replay the whole stream into it",
		`Rebuilds one projection from scratch: empties its read model and its gate
state, then replays EventStoreDB's $all from the start — mapped and filtered
like 'run' (--stream-prefix, --type-regex, --version-field) — through the
same version gate, in batches of --batch-size on --workers workers. Progress
(events, events/s, ETA) goes to stderr.

Live workers of the projection, in every process, pause meanwhile: each
batch waits for the rebuild's advisory lock, and resumes when it ends
(batches of other projections pause with it when they share a batch). The
replay reads $all up to its end when the rebuild starts; the workers apply
what comes after. A rebuild that fails or is killed half-way leaves the
projection partly rebuilt: run it again, it starts over.

Changes: DELETES the projection's read model (its Resetter) and its rows in
versions, applied, parked, quarantine and conflicts — parked and quarantined
events and recorded conflicts of the projection are lost, and the replay
decides again — then rebuilds them. Operator decisions (skips, declared
gaps) are not replayed: a gap declared by hand parks again until declared
again. Records rebuild-start and rebuild-done in the operator log. On a
terminal it asks first; elsewhere it refuses to start without --yes.`,
		func(fs *pflag.FlagSet) *rebuildOptions {
			o := &rebuildOptions{a: c.a}
			clikit.BindLog(fs, &o.log, "warn")
			clikit.BindDB(fs, &o.db)
			bindESDB(fs, &o.es)
			clikit.BindOutput(fs, &o.out)
			fs.IntVar(&o.Workers, "workers", 4, "concurrent batches; aggregates are partitioned across them by hash")
			fs.IntVar(&o.BatchSize, "batch-size", 500, "events per transaction, at most")
			fs.BoolVarP(&o.Yes, "yes", "y", false, "do not ask: delete and rebuild")
			return o
		}, c.Run)
}

// RebuildReport is what rebuild prints with --json.
type RebuildReport struct {
	Projection string `json:"projection"`
	// Events counts the events replayed through the gate.
	Events int64 `json:"events"`
	// Read counts the $all events read; Skipped those that were not for
	// the projections (system events, other streams or types).
	Read    int64 `json:"read"`
	Skipped int64 `json:"skipped"`
	// Seconds is the rebuild's duration, Rate Events per second of it.
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"events_per_second"`
}

// Run rebuilds the projection.
func (c *rebuildCmd) Run(ctx context.Context, o *rebuildOptions) error {
	if !o.Yes {
		fmt.Fprintf(c.a.stderr, "This deletes the read model of %s and its parked, quarantined and conflict records in schema %s, then replays the stream.\nType the projection's name to go on: ", o.Projection, o.db.Schema)
		line, _ := bufio.NewReader(c.a.stdin).ReadString('\n')
		if strings.TrimSpace(line) != o.Projection {
			return errors.New("rebuild: not confirmed; nothing changed")
		}
	}
	logger := o.log.Logger(c.a.stderr)
	pool, err := clikit.Connect(ctx, &o.db, int32(o.Workers+3), logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := c.a.prepareSchema(ctx, pool, &o.db, false, false, logger); err != nil {
		return err
	}
	proc, err := c.a.processor(pool, &o.db, logger)
	if err != nil {
		return err
	}
	if err := proc.Setup(ctx); err != nil {
		return err // the processor names the projection and the step
	}
	r, err := esdb.NewReplayer(o.es.config(esdb.Config{Workers: o.Workers, BatchSize: o.BatchSize, Logger: logger}))
	if err != nil {
		return err
	}
	con := clikit.NewConsole(c.a.stderr, &o.log)
	bar := clikit.NewPositionBar(con, "rebuild "+o.Projection, func() float64 { return r.Progress().Fraction })
	con.Printf([]any{"projection", o.Projection}, "rebuilding %s: waiting for the projection's lock (live workers pause)", o.Projection)
	start := time.Now()
	var events int64
	err = proc.Rebuild(ctx, o.Projection, r.Replay, &projection.RebuildOptions{Progress: func(p projection.RebuildProgress) {
		events = p.Events
		bar.Update(p.Events)
	}})
	bar.Finish(events)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	prog := r.Progress()
	rep := RebuildReport{Projection: o.Projection, Events: events, Read: prog.Read, Skipped: prog.Skipped, Seconds: elapsed.Seconds()}
	if s := elapsed.Seconds(); s > 0 {
		rep.Rate = float64(events) / s
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, rep)
	}
	skipped := ""
	if rep.Skipped > 0 {
		skipped = fmt.Sprintf(" (%d other $all events skipped)", rep.Skipped)
	}
	fmt.Fprintf(c.a.stdout, "rebuilt %s: %d events replayed in %s, %.0f events/s%s\n",
		strings.TrimSpace(o.Projection), events, clikit.Age(elapsed), rep.Rate, skipped)
	return nil
}
