package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// rebuildOptions configures rebuild.
type rebuildOptions struct {
	log        clikit.LogOptions
	db         clikit.DBOptions
	src        sourceOptions
	out        clikit.OutputOptions
	a          *App
	Projection string
	Yes        bool

	// In place.
	InPlace   bool
	Workers   int
	BatchSize int

	// Side by side.
	ReplayBatch   int
	MaxAggregates int
	CatchUpEvents int64
	Retention     time.Duration
	ExpectChanges bool
	VerifyTimeout time.Duration
	Unlogged      bool
	Wait          bool
	By            string
	Name          string
}

func (o *rebuildOptions) validate(args []string) error {
	name, err := clikit.OneArg(args, "projection")
	if err != nil {
		return err
	}
	if o.Projection, err = o.a.pickProjection(name); err != nil {
		return err
	}
	if err := cmp.Or(
		clikit.ValidateAll(&o.log, &o.db, &o.src),
		clikit.AtLeast("workers", o.Workers, 1),
		clikit.AtLeast("batch-size", o.BatchSize, 1),
		clikit.AtLeast("replay-batch-size", o.ReplayBatch, 1),
		clikit.AtLeast("max-aggregates", o.MaxAggregates, 1),
		clikit.AtLeast("catch-up-events", o.CatchUpEvents, 1),
		clikit.Positive("verify-timeout", o.VerifyTimeout),
	); err != nil {
		return err
	}
	if o.Retention == 0 {
		return clikit.Usagef("--retention must not be 0 (negative retires the previous generation at once)")
	}
	if o.InPlace && !o.Yes && !o.a.Terminal() {
		return clikit.Usagef("rebuild --in-place deletes the read model of %s: pass --yes to confirm (there is no terminal to ask on)", o.Projection)
	}
	return nil
}

// rebuildCmd rebuilds a projection from the stream.
type rebuildCmd struct{ a *App }

func (c *rebuildCmd) command() *cobra.Command {
	cmd := leaf("rebuild <projection>", "rebuild a projection from the stream: side by side, verified, switched in at once",
		`Rebuilds one projection from the history of the source --source names —
EventStoreDB's $all, the events table… — mapped and filtered as the workers
do: with the mapping they recorded in the schema (--name picks the source
when there are several; the source's mapping flags below, when given, win)
— as a new generation of it, side by side with the live one, which keeps serving reads and being
fed by the workers with no pause:

  replay     the history from the start into the new generation's own tables (a
             schema of its own) and gate state, in bulk: one writer, large
             batches (--replay-batch-size), each aggregate's version kept in
             memory (--max-aggregates, then looked up), --unlogged makes the
             tables unlogged until it is done;
  catch-up   the workers of the projection's code version feed it from now
             on, with the live one; the rebuild reads the history up to its end
             through the gate, repeating while a pass reads more than
             --catch-up-events;
  verify     the projection's own checks (the ledger: legs balance, balances
             sum their legs), nothing quarantined or parked beyond the live
             generation, and — when the code version did not change — the
             same aggregate versions and the same content (row count and
             checksum per table) as the live generation, waiting up to
             --verify-timeout for the two to be in step;
  switch     one transaction: the new generation is live for every reader,
             the HTTP API, status and the operator commands; the old one is
             previous and stays fed for --retention, so that 'rebuild
             rollback' is instant and exact.

A failed check keeps the live generation, marks the new one failed (see
'rebuild status') and exits 1; drop it with 'rebuild drop'. Progress —
phase, events, events/s, ETA — goes to stderr. Killed at any point (even
SIGKILL), the rebuild resumes where it stopped when run again. Only one
rebuild of a projection runs at a time: another one fails, or with --wait
waits and reports the first one's outcome.

A rebuild with a new code version of the projection needs workers of that
version to keep it current once live: start them (with a consumer of their
own: another --group, or another --name in catch-up mode) before or during
the rebuild; the old workers keep feeding the previous generation until they
stop.

--in-place is the old way: it empties the live read model and its gate
state, pauses the projection's live workers in every process and replays
into it through the gate (--workers, --batch-size); readers see it half
built meanwhile.

Changes: creates a schema with the new generation's tables and gate rows,
then switches readers and workers to it; drops generations retired before
(previous ones whose --retention ended). Records rebuild-start,
rebuild-switch (or rebuild-failed) in the operator log. With --in-place it
DELETES the read model and its parked, quarantined and conflict records
(asking first on a terminal; elsewhere it refuses without --yes).`,
		func(fs *pflag.FlagSet) *rebuildOptions {
			o := &rebuildOptions{a: c.a}
			clikit.BindLog(fs, &o.log, "warn")
			clikit.BindDB(fs, &o.db)
			c.a.bindSource(fs, "rebuild", &o.src)
			clikit.BindOutput(fs, &o.out)
			fs.BoolVar(&o.InPlace, "in-place", false, "empty the live read model and replay into it, pausing live workers (readers see it half built)")
			fs.IntVar(&o.Workers, "workers", 4, "--in-place: concurrent batches; aggregates are partitioned across them by hash")
			fs.IntVar(&o.BatchSize, "batch-size", 500, "--in-place: events per transaction, at most")
			fs.BoolVarP(&o.Yes, "yes", "y", false, "--in-place: do not ask: delete and rebuild")
			fs.IntVar(&o.ReplayBatch, "replay-batch-size", projection.DefaultBuildBatch, "events per transaction of the replay (whole $all pages)")
			fs.IntVar(&o.MaxAggregates, "max-aggregates", projection.DefaultBuildAggregates, "aggregates whose version the replay keeps in memory (about 100 bytes each)")
			fs.Int64Var(&o.CatchUpEvents, "catch-up-events", projection.DefaultCatchUpEvents, "read $all again while the last pass read more records than this")
			fs.DurationVar(&o.Retention, "retention", projection.DefaultRetention, "how long the previous generation stays fed, for rollback (negative: retire it at once)")
			fs.BoolVar(&o.ExpectChanges, "expect-changes", false, "a repair of a read model known to be damaged: do not require the same content as the live generation")
			fs.DurationVar(&o.VerifyTimeout, "verify-timeout", projection.DefaultVerifyTimeout, "how long verification waits for the new generation and the live one to be in step")
			fs.BoolVar(&o.Unlogged, "unlogged", false, "make the new generation's tables unlogged during the replay (lost in a database crash, the replay then starts again; made logged at the end, which rewrites them)")
			fs.BoolVar(&o.Wait, "wait", false, "if another process is rebuilding the projection, wait for it and report its outcome")
			fs.StringVar(&o.By, "by", "", "who rebuilds, for the operator log (default: $USER@host)")
			fs.StringVar(&o.Name, "name", "", "read the source as the workers of this source `name` do (its recorded mapping); default: the only one recorded")
			clikit.SetEnv(fs, "by", clikit.EnvOperator)
			return o
		}, c.Run)
	cmd.SetUsageFunc(clikit.GroupedUsage)
	cmd.AddCommand((&rebuildStatusCmd{c.a}).command(), (&rebuildRollbackCmd{c.a}).command(), (&rebuildDropCmd{c.a}).command())
	return cmd
}

// RebuildReport is what rebuild prints with --json.
type RebuildReport struct {
	Projection string `json:"projection"`
	// Mode is "side-by-side" or "in-place".
	Mode string `json:"mode"`
	// Generation is the generation built and now live, Previous the one
	// live before (side by side).
	Generation  int `json:"generation,omitempty"`
	Previous    int `json:"previous,omitempty"`
	CodeVersion int `json:"code_version,omitempty"`
	// Resumed tells that the run continued a rebuild that had stopped;
	// AlreadyLive that another process built it while this one waited.
	Resumed     bool `json:"resumed,omitempty"`
	AlreadyLive bool `json:"already_live,omitempty"`
	// Events counts the events replayed (in place) or read (side by side,
	// this run).
	Events int64 `json:"events"`
	// Read counts the $all events read; Skipped those that were not for
	// the projections (system events, other streams or types).
	Read    int64 `json:"read"`
	Skipped int64 `json:"skipped"`
	// Seconds is the rebuild's duration, Rate Events per second of it.
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"events_per_second"`
}

// Run rebuilds the projection: one Processor.Build, side by side or, with
// --in-place, in place (BuildOptions.InPlace).
func (c *rebuildCmd) Run(ctx context.Context, o *rebuildOptions) error {
	if o.InPlace && !o.Yes {
		fmt.Fprintf(c.a.stderr, "This deletes the read model of %s and its parked, quarantined and conflict records in schema %s, then replays the stream.\nType the projection's name to go on: ", o.Projection, o.db.Schema)
		line, _ := bufio.NewReader(c.a.stdin).ReadString('\n')
		if strings.TrimSpace(line) != o.Projection {
			return errors.New("rebuild: not confirmed; nothing changed")
		}
	}
	logger := o.log.Logger(c.a.stderr)
	conns := int32(6)
	if o.InPlace {
		conns = int32(o.Workers + 3) // the replay's workers, the lock's session, the reset
	}
	pool, err := clikit.Connect(ctx, &o.db, conns, logger)
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
	oc := o.src.openConfig(&o.db, "", logger)
	if o.InPlace {
		// In place the live generation's tables are emptied and refilled:
		// they must exist (side by side, Build creates the new one's).
		if err := proc.Setup(ctx); err != nil {
			return err // the processor names the projection and the step
		}
		oc.Workers, oc.BatchSize = o.Workers, o.BatchSize
	}
	oc.Processor, oc.Name, oc.Note = proc, o.Name, clikit.NewConsole(c.a.stderr, &o.log).Note // the workers' mapping
	r, err := o.src.opener.Replayer(ctx, o.src.url, oc)
	if err != nil {
		return err
	}
	con := clikit.NewConsole(c.a.stderr, &o.log)
	var bars rebuildBars = &phaseBars{con: con}
	if o.InPlace {
		bars = &replayBar{bar: clikit.NewPositionBar(con, "rebuild "+o.Projection, func() float64 { return r.Progress().Fraction })}
		con.Printf([]any{"projection", o.Projection}, "rebuilding %s in place: waiting for the projection's lock (live workers pause)", o.Projection)
	}
	// In place, Build reads InPlace, Replay, By and Progress only; side by
	// side, all but Replay.
	res, err := proc.Build(ctx, o.Projection, &projection.BuildOptions{
		InPlace: o.InPlace, Stream: r, Replay: r.Replay,
		BatchSize: o.ReplayBatch, MaxAggregates: o.MaxAggregates, CatchUpEvents: o.CatchUpEvents,
		Retention: o.Retention, ExpectChanges: o.ExpectChanges, VerifyTimeout: o.VerifyTimeout, Unlogged: o.Unlogged, Wait: o.Wait,
		By: cmp.Or(o.By, c.a.actor()), Progress: bars.update,
	})
	bars.finish()
	var verr *projection.VerificationError
	switch {
	case errors.As(err, &verr):
		return fmt.Errorf("%w; the live generation stays live; generation %d is kept for inspection ('%s rebuild status %s'; '%s rebuild drop %s --generation %d' drops it)",
			err, verr.Generation, c.a.name, o.Projection, c.a.name, o.Projection, verr.Generation)
	case errors.Is(err, projection.ErrBuildInProgress):
		return fmt.Errorf("%w (--wait waits for it)", err)
	case err != nil:
		return err
	}
	prog := r.Progress()
	rep := RebuildReport{Projection: o.Projection, Mode: "side-by-side", Events: res.Events,
		Read: prog.Read, Skipped: prog.Skipped, Seconds: res.Elapsed.Seconds()}
	if o.InPlace {
		rep.Mode = "in-place"
	} else {
		rep.Generation, rep.Previous, rep.CodeVersion = res.Generation, res.Previous, res.CodeVersion
		rep.Resumed, rep.AlreadyLive = res.Resumed, res.AlreadyLive
	}
	if s := res.Elapsed.Seconds(); s > 0 {
		rep.Rate = float64(res.Events) / s
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, rep)
	}
	c.print(o, res, rep)
	return nil
}

// print writes what a rebuild did for people.
func (c *rebuildCmd) print(o *rebuildOptions, res projection.BuildResult, rep RebuildReport) {
	switch {
	case o.InPlace:
		skipped := ""
		if rep.Skipped > 0 {
			skipped = fmt.Sprintf(" (%d other $all events skipped)", rep.Skipped)
		}
		fmt.Fprintf(c.a.stdout, "rebuilt %s: %d events replayed in %s, %.0f events/s%s\n",
			strings.TrimSpace(o.Projection), res.Events, clikit.Age(res.Elapsed), rep.Rate, skipped)
		return
	case res.AlreadyLive:
		fmt.Fprintf(c.a.stdout, "generation %d of %s, built by another process meanwhile, is live\n", res.Generation, o.Projection)
		return
	}
	resumed := ""
	if res.Resumed {
		resumed = " (resumed)"
	}
	fmt.Fprintf(c.a.stdout, "rebuilt %s side by side%s: generation %d (code version %d) is live; %d events read in %s, %.0f events/s\n",
		o.Projection, resumed, res.Generation, res.CodeVersion, res.Events, clikit.Age(res.Elapsed), rep.Rate)
	if o.Retention > 0 {
		fmt.Fprintf(c.a.stdout, "generation %d stays fed for %s: '%s rebuild rollback %s' returns to it\n",
			res.Previous, clikit.Age(o.Retention), c.a.name, o.Projection)
	}
}

// rebuildBars draws a rebuild's progress: BuildOptions.Progress, then
// finish once Build returns.
type rebuildBars interface {
	update(projection.BuildProgress)
	finish()
}

// phaseBars draws one progress bar per phase of a side-by-side rebuild.
type phaseBars struct {
	con   *clikit.Console
	mu    sync.Mutex
	bar   *clikit.ProgressBar
	phase string
	done  int64
	frac  float64
}

func (p *phaseBars) update(pr projection.BuildProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr.Phase != p.phase || p.bar == nil {
		if p.bar != nil {
			p.bar.Finish(p.done)
		}
		p.phase, p.frac = pr.Phase, pr.Fraction
		label := fmt.Sprintf("rebuild %s generation %d: %s", pr.Projection, pr.Generation, pr.Phase)
		if pr.Fraction >= 0 {
			p.bar = clikit.NewPositionBar(p.con, label, func() float64 { return p.frac })
		} else {
			p.bar = clikit.NewProgressBar(p.con, label, "events", 0)
		}
	}
	p.done, p.frac = pr.PhaseEvents, max(pr.Fraction, 0)
	// The bar first (a new phase's is drawn at once), then what it says of
	// it: "switch", then "generation 2 is live".
	p.bar.Update(pr.PhaseEvents)
	if pr.Note != "" {
		p.bar.Note(pr.Note)
	}
}

func (p *phaseBars) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish(p.done)
	}
}

// replayBar draws an in-place rebuild's one bar: the events replayed, how
// far through the history the source's replayer is.
type replayBar struct {
	bar    *clikit.ProgressBar
	mu     sync.Mutex
	events int64
}

func (p *replayBar) update(pr projection.BuildProgress) {
	p.mu.Lock()
	p.events = pr.Events
	p.mu.Unlock()
	p.bar.Update(pr.Events)
}

func (p *replayBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Finish(p.events)
}

// genOptions configures the rebuild subcommands that act on generations.
type genOptions struct {
	opOptions
	actOptions
	a          *App
	Projection string
	Generation int
	Yes        bool
	drop       bool
}

func (o *genOptions) validate(args []string) error {
	name, err := clikit.OneArg(args, "projection")
	if err != nil {
		return err
	}
	if o.Projection, err = o.a.pickProjection(name); err != nil {
		return err
	}
	if err := o.opOptions.validate(); err != nil {
		return err
	}
	if o.drop {
		if o.Generation < 1 {
			return clikit.Usagef("--generation is required")
		}
		if !o.Yes && !o.DryRun && !o.a.Terminal() {
			return clikit.Usagef("rebuild drop deletes generation %d of %s: pass --yes to confirm (there is no terminal to ask on)", o.Generation, o.Projection)
		}
	}
	return nil
}

// rebuildStatusCmd lists a projection's generations.
type rebuildStatusCmd struct{ a *App }

func (c *rebuildStatusCmd) command() *cobra.Command {
	return leaf("status <projection>", "list a projection's generations: state, phase, position, lag",
		`Lists every generation of a projection: its code version, state (building,
catchup, live, previous, failed, retired, dropped), the phase of a rebuild
working on it, the events applied in it (by its rebuild and by the workers),
the events its rebuild read (0 for a generation no rebuild built), its lag
(the age of the last event it read, while it is built), and why it failed.

Read-only.`,
		func(fs *pflag.FlagSet) *genOptions {
			o := &genOptions{a: c.a}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run lists the generations.
func (c *rebuildStatusCmd) Run(ctx context.Context, o *genOptions) error {
	proc, closeFn, err := c.a.open(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	gens, err := proc.Generations(ctx, o.Projection)
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, gens)
	}
	t := clikit.NewTable(c.a.stdout, "GENERATION", "CODE VERSION", "STATE", "PHASE", "APPLIED", "REBUILD READ", "LAG", "SCHEMA", "LIVE AT", "KEEP UNTIL", "ERROR")
	for _, g := range gens {
		lag := "-"
		if g.Lag > 0 {
			lag = clikit.Age(g.Lag)
		}
		t.Row(g.Generation, g.CodeVersion, g.State, g.Phase, appliedCell(g.Applied), g.Events, lag, g.Schema, g.LiveAt, g.KeepUntil, g.Error)
	}
	return t.Flush()
}

// rebuildRollbackCmd makes the previous generation live again.
type rebuildRollbackCmd struct{ a *App }

func (c *rebuildRollbackCmd) command() *cobra.Command {
	return leaf("rollback <projection>", "make the previous generation of a projection live again",
		`Switches readers, the HTTP API and the operator commands back to the
projection's previous generation, in one transaction; the live one becomes
previous (still fed, so a second rollback returns to it). The previous
generation is current only while workers of its code version run: they keep
feeding it after a switch until its retention ends.

Changes: which generation is live; records rebuild-rollback in the operator
log (with --by). --dry-run prints the generation it would make live.`,
		func(fs *pflag.FlagSet) *genOptions {
			o := &genOptions{a: c.a}
			bindOp(fs, &o.opOptions)
			bindAct(fs, &o.actOptions, "print the generation it would make live")
			return o
		}, c.Run)
}

// Run rolls back.
func (c *rebuildRollbackCmd) Run(ctx context.Context, o *genOptions) error {
	return c.a.report(ctx, &o.opOptions, func(proc *projection.Processor) (projection.ActionReport, error) {
		return proc.Rollback(ctx, o.Projection, o.options(c.a, 0, ""))
	})
}

// rebuildDropCmd drops a generation.
type rebuildDropCmd struct{ a *App }

func (c *rebuildDropCmd) command() *cobra.Command {
	return leaf("drop <projection> --generation N", "drop a generation of a projection that is not live",
		`Drops a generation that is not live — previous, failed, retired, or one
being built that no rebuild is working on: its schema with its tables (for
generation 1, whose tables are in the connection's search_path, their rows,
through the projection's Reset) and its gate rows. A rebuild drops the
retired generations (previous ones past their retention) by itself.

Changes: DROPS the generation's tables and gate rows; no rollback to it is
possible afterwards. Records rebuild-drop in the operator log (with --by). On
a terminal it asks first; elsewhere it refuses to start without --yes.
--dry-run counts the rows and tables it would drop and needs no --yes.`,
		func(fs *pflag.FlagSet) *genOptions {
			o := &genOptions{a: c.a, drop: true}
			bindOp(fs, &o.opOptions)
			bindAct(fs, &o.actOptions, "count the gate rows, parked events and tables it would drop")
			fs.IntVar(&o.Generation, "generation", 0, "the generation to drop (see 'rebuild status')")
			fs.BoolVarP(&o.Yes, "yes", "y", false, "do not ask: drop")
			return o
		}, c.Run)
}

// Run drops the generation.
func (c *rebuildDropCmd) Run(ctx context.Context, o *genOptions) error {
	if !o.Yes && !o.DryRun {
		fmt.Fprintf(c.a.stderr, "This drops generation %d of %s (its tables and gate rows) in schema %s.\nType the projection's name to go on: ", o.Generation, o.Projection, o.db.Schema)
		line, _ := bufio.NewReader(c.a.stdin).ReadString('\n')
		if strings.TrimSpace(line) != o.Projection {
			return errors.New("rebuild drop: not confirmed; nothing changed")
		}
	}
	return c.a.report(ctx, &o.opOptions, func(proc *projection.Processor) (projection.ActionReport, error) {
		return proc.DropGeneration(ctx, o.Projection, o.options(c.a, o.Generation, ""))
	})
}
