package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Exit codes returned by Main.
const (
	// ExitOK: the command succeeded.
	ExitOK = 0
	// ExitFailure: the command failed (the error is printed on stderr).
	ExitFailure = 1
	// ExitUsage: the command line was invalid (unknown command or flag,
	// missing or invalid argument).
	ExitUsage = 2
	// ExitIncomplete: the command did what it could but something is left
	// that needs an operator (parked repair: versions missing at the
	// source).
	ExitIncomplete = 3
)

// Config configures a binary built on this package. Only Projections is
// required.
type Config struct {
	// Name is the program name shown in help and errors. Default "inorder".
	Name string

	// Version is the version "inorder version" and --version print.
	// Default: the main module's version and VCS revision from the build
	// information (set it from -ldflags "-X main.version=…" where the build
	// has no VCS information, as in a container build).
	Version string

	// Projections are the projections the binary runs (run), serves
	// (serve), rebuilds (rebuild) and operates on (status, parked,
	// quarantine, conflicts, rejected). At least one is required. They
	// must not be shared with another Config run concurrently.
	Projections []projection.Projection

	// Processor is the template of the processor configuration: Limits,
	// MaxAttempts, MaxRetries and RetryBackoff are used as given (zero
	// values take the processor's defaults); Schema and Logger are set
	// from the command line.
	Processor projection.Config

	// Sources are the sources the binary reads: run, rebuild and parked
	// repair choose one by the scheme of --source's URL (esdb://,
	// postgres://…) and show each one's flags in their help. Each source
	// package provides its driver: esdb.Driver(), pgtable.Driver(). The
	// library links only the sources its binary lists here. Default: none
	// — those commands then fail with a usage error.
	Sources []source.Driver

	// Effects are the binary's effect handlers (package effects), one per
	// effect kind. With any, run performs the intents the projections
	// record (--effects-workers at a time; 'effects work' does it alone),
	// migrate also applies River's migrations (--river-schema), and status,
	// /v1/status and /metrics show the intents. Every command that builds
	// the projections' processor first creates the effects client on its
	// pool and hands it to the projections that implement effects.Binder,
	// so no handler runs without it. Default: none — projections that
	// record intents must then not be given any.
	Effects []effects.Handler

	// EffectsConfig is the template of the effects client's configuration:
	// MaxAttempts, RetryBackoff, MaxBackoff, PollInterval and OnAttempt are
	// used as given (zero values take the package's defaults); Timeout,
	// Lease, ReconcileInterval and RescueAfter are the defaults of run's
	// and effects work's --effects-call-timeout, --effects-lease,
	// --effects-reconcile-interval and --effects-rescue-after; Schema,
	// RiverSchema and Logger are set from the command line, Workers by
	// --effects-workers.
	EffectsConfig effects.Config

	// Commands add a binary's own commands to the command line, next to
	// the built-in ones: each is called once per run with the App and
	// returns a command (with subcommands, if it likes). Its flags get
	// their environment variables like the built-in ones (see package
	// doc); an error wrapping ErrUsage exits with status 2. The shipped
	// binary adds the demo this way.
	Commands []func(*App) *cobra.Command

	// Stdin answers the questions of commands that ask before they
	// destroy (rebuild), when it is a terminal. Default os.Stdin.
	Stdin io.Reader
	// Stdout receives the commands' output (tables, JSON, summaries).
	// Default os.Stdout.
	Stdout io.Writer
	// Stderr receives logs, progress bars and errors. Default os.Stderr.
	Stderr io.Writer
	// Getenv looks up the environment variables that stand in for flags.
	// Default os.Getenv.
	Getenv func(string) string
}

// ErrUsage is wrapped by the errors Run returns for invalid command lines
// (exit status 2). Commands of a binary's own return one with Usagef.
var ErrUsage = clikit.ErrUsage

// ErrIncomplete is wrapped by the error of a command that did what it
// could while something is left for an operator (exit status 3).
var ErrIncomplete = errors.New("incomplete")

// Usagef returns an error wrapping ErrUsage: the command line was invalid.
func Usagef(format string, args ...any) error { return clikit.Usagef(format, args...) }

// Main runs the command line in os.Args and returns the process's exit code
// (ExitOK, ExitFailure, ExitUsage or ExitIncomplete); a main function ends
// with os.Exit(cli.Main(cfg)).
//
// The first SIGINT or SIGTERM asks the command to stop gracefully: workers
// stop taking deliveries, finish and commit the batches in flight, and the
// HTTP server drains its requests. A second signal cancels everything at
// once.
func Main(cfg Config) int {
	hard, cancelHard := context.WithCancel(context.Background())
	defer cancelHard()
	soft, stopSoft := signal.NotifyContext(hard, os.Interrupt, syscall.SIGTERM)
	defer stopSoft()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-soft.Done():
		}
		// Listen for the second signal before the first listener goes, so
		// no signal falls through to the default action in between. The
		// listener stays until the process exits: a signal that comes while
		// a drained command returns must not kill it on its way out.
		second, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		stopSoft()
		if hard.Err() != nil {
			return
		}
		select {
		case <-done:
		case <-second.Done():
			cancelHard()
		}
	}()
	a := newApp(cfg, soft)
	return a.exitCode(a.execute(hard, os.Args[1:]))
}

// Run runs one command line (args without the program name) and returns its
// error: nil on success, an error wrapping ErrUsage for an invalid command
// line. Cancelling ctx stops the command at once; Run installs no signal
// handlers (Main does) and prints no error (Main does).
func Run(ctx context.Context, cfg Config, args []string) error {
	return newApp(cfg, ctx).execute(ctx, args)
}

// App is one run of the command line, as the commands see it: what a
// binary's own commands (Config.Commands) share with the built-in ones.
type App struct {
	cfg    Config
	name   string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// drain is done when the command should stop gracefully (first
	// signal); the command's context is done when it must stop at once.
	drain context.Context
	// ran is set once a command's RunE starts: an error before that is the
	// command line's.
	ran bool
	// json is set when the running command logs JSON: errors are printed
	// as JSON too.
	json bool
	// fx is the effects client the command made (effectsClient), if any.
	fx *effects.Client
	// args is the command line being run.
	args []string
	// traces is the command's tracing, once made (tracing).
	traces *clikit.Tracing
}

func newApp(cfg Config, drain context.Context) *App {
	a := &App{cfg: cfg, name: cfg.Name, stdin: cfg.Stdin, stdout: cfg.Stdout, stderr: cfg.Stderr, getenv: cfg.Getenv, drain: drain}
	if a.name == "" {
		a.name = "inorder"
	}
	if a.stdin == nil {
		a.stdin = os.Stdin
	}
	if a.stdout == nil {
		a.stdout = os.Stdout
	}
	if a.stderr == nil {
		a.stderr = os.Stderr
	}
	// Logs, notes and progress of one command share the outputs.
	a.stdout, a.stderr = clikit.NewSyncWriter(a.stdout), clikit.NewSyncWriter(a.stderr)
	if a.getenv == nil {
		a.getenv = os.Getenv
	}
	return a
}

// Name is the program's name, as in "inorder status".
func (a *App) Name() string { return a.name }

// Stdout receives a command's output: tables, JSON, summaries.
func (a *App) Stdout() io.Writer { return a.stdout }

// Stderr receives logs, progress and notes.
func (a *App) Stderr() io.Writer { return a.stderr }

// Terminal reports whether stdin is a terminal a person can answer on.
func (a *App) Terminal() bool { return clikit.IsTerminal(a.stdin) }

// Getenv looks up an environment variable (Config.Getenv).
func (a *App) Getenv(key string) string { return a.getenv(key) }

// Drain is closed when the command should stop gracefully: at the first
// SIGINT or SIGTERM. The command's context (cobra.Command.Context) is
// cancelled when it must stop at once: at the second.
func (a *App) Drain() <-chan struct{} { return a.drain.Done() }

// Projections are the binary's projections (Config.Projections).
func (a *App) Projections() []projection.Projection { return a.cfg.Projections }

// ProcessorConfig is the template of the processors' configuration
// (Config.Processor).
func (a *App) ProcessorConfig() projection.Config { return a.cfg.Processor }
