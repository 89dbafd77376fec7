package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/inorder/inorder/projection"
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
)

// DefaultHTTPAddr is the listen address of the HTTP server of run, serve and
// demo when --http-addr is not given.
const DefaultHTTPAddr = "127.0.0.1:8080"

// Config configures a binary built on this package. Only Projections is
// required.
type Config struct {
	// Name is the program name shown in help and errors. Default "inorder".
	Name string

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

	// Demo, if set, enables the demo command with this workload. Nil
	// leaves the demo out of the binary.
	Demo *Demo

	// Stdout receives the commands' output (tables, JSON, summaries).
	// Default os.Stdout.
	Stdout io.Writer
	// Stderr receives logs, progress bars and errors. Default os.Stderr.
	Stderr io.Writer
	// Getenv looks up the environment variables that stand in for flags.
	// Default os.Getenv.
	Getenv func(string) string
}

// Main runs the command line in os.Args and returns the process's exit code
// (ExitOK, ExitFailure or ExitUsage); a main function ends with
// os.Exit(cli.Main(cfg)).
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
	return exitCode(newApp(cfg), run(hard, soft, cfg, os.Args[1:]))
}

// Run runs one command line (args without the program name) and returns its
// error: nil on success, an error wrapping ErrUsage for an invalid command
// line. Cancelling ctx stops the command at once; Run installs no signal
// handlers (Main does).
func Run(ctx context.Context, cfg Config, args []string) error {
	return run(ctx, ctx, cfg, args)
}

// ErrUsage is wrapped by the errors Run returns for invalid command lines.
var ErrUsage = errors.New("usage")

// ErrVerify is wrapped by the error of a demo whose read model does not
// equal the in-order fold of its workload.
var ErrVerify = errors.New("verification failed")

func exitCode(a *app, err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errHelp):
		return ExitOK
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(a.stderr, "%s: %v\n", a.name, err)
		return ExitUsage
	default:
		fmt.Fprintf(a.stderr, "%s: error: %v\n", a.name, err)
		return ExitFailure
	}
}

// errHelp reports that help was asked for and printed.
var errHelp = errors.New("help requested")

func run(hard, drain context.Context, cfg Config, args []string) error {
	a := newApp(cfg)
	a.drain = drain
	if len(cfg.Projections) == 0 {
		return errors.New("cli: Config.Projections is empty")
	}
	err := a.root().dispatch(hard, a, nil, args)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

// app is one invocation: the configuration and its writers.
type app struct {
	cfg    Config
	name   string
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// drain is done when the command should stop gracefully (first
	// signal); the context passed to Run is done when it must stop at
	// once.
	drain context.Context
}

func newApp(cfg Config) *app {
	a := &app{cfg: cfg, name: cfg.Name, stdout: cfg.Stdout, stderr: cfg.Stderr, getenv: cfg.Getenv, drain: context.Background()}
	if a.name == "" {
		a.name = "inorder"
	}
	if a.stdout == nil {
		a.stdout = os.Stdout
	}
	if a.stderr == nil {
		a.stderr = os.Stderr
	}
	if a.getenv == nil {
		a.getenv = os.Getenv
	}
	return a
}

// logger returns the logger the options ask for, writing to stderr.
func (a *app) logger(o *logOptions) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.level}
	if o.Format == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, hopts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, hopts))
}
