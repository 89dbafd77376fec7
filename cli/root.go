package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inorder/inorder/internal/clikit"
)

// root builds the command tree.
func (a *App) root() *cobra.Command {
	root := a.group(a.name, "", `inorder turns an at-least-once, any-order event stream into exactly-once,
in-order effects on PostgreSQL read models.

Every flag that has an environment variable names it in its help
(DATABASE_URL, ESDB_URL, INORDER_SCHEMA, INORDER_HTTP_ADDR, ...); a flag on
the command line wins.`)
	root.Version = a.version().String()
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if name := a.unknownCommand(c); name != "" {
			// "inorder bogus --log-format json": the command is what is
			// wrong, not the flag the group does not have.
			return clikit.Usagef("unknown command %q", name)
		}
		return clikit.Usagef("%v", err)
	})
	migrate := (&migrateCmd{a}).command()
	migrate.AddCommand((&migrateStatusCmd{a}).command())
	root.AddCommand(
		migrate,
		(&healthcheckCmd{a}).command(),
		(&runCmd{a}).command(),
		(&serveCmd{a}).command(),
		(&statusCmd{a}).command(),
		a.group("parked", "inspect and unblock aggregates waiting for missing versions",
			`Parked events are future versions stored until the versions before them
arrive. These commands list them, fetch the missing versions from the source,
or declare versions that will never arrive.`,
			(&parkedListCmd{a}).command(),
			(&parkedShowCmd{a}).command(),
			(&parkedRepairCmd{a}).command(),
			(&declareGapCmd{a}).command(),
		),
		a.group("quarantine", "inspect, retry or skip events whose handler failed for good",
			`A quarantined event is one whose projection handler kept failing. It blocks
its aggregate (later versions park behind it) and nothing else. Fix the cause,
then retry it; or skip it, on purpose, with a reason.`,
			(&quarantineListCmd{a}).command(),
			(&quarantineActionCmd{a: a}).command(),
			(&quarantineActionCmd{a: a, skip: true}).command(),
		),
		a.group("conflicts", "list deliveries that reuse a version with another id or payload",
			`A conflict is a delivery that claims an (aggregate, version) already held by
a different event. It is recorded, never applied, and counts as open until
an operator acknowledges it.`,
			(&conflictsListCmd{a}).command(),
			(&conflictsAckCmd{a}).command(),
		),
		a.group("rejected", "list, replay or dismiss deliveries that failed validation",
			`A rejected delivery had an invalid envelope. It was acknowledged to the source,
recorded with its reason, and applied nowhere. It is pending until an
operator resolves it: replays it, dismisses it, or declares its version
missing ('parked declare-gap').`,
			(&rejectedListCmd{a}).command(),
			(&rejectedReplayCmd{a}).command(),
			(&rejectedDismissCmd{a}).command(),
		),
		(&oplogCmd{a}).command(),
		(&rebuildCmd{a}).command(),
		a.effectsGroup(),
		(&versionCmd{a}).command(),
	)
	for _, ext := range a.cfg.Commands {
		root.AddCommand(ext(a))
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Long = "Prints the help of any command: what it does, what it changes, its flags.\n\nRead-only."
		case "completion":
			c.Long = strings.TrimSpace(c.Long) + "\n\nRead-only: prints a script on stdout."
			for _, s := range c.Commands() {
				s.Long = strings.TrimSpace(s.Long) + "\n\nRead-only: prints the script on stdout."
			}
		}
	}
	clikit.AnnotateEnv(root)
	return root
}

// unknownCommand returns the word of the command line that names no
// subcommand of the group c, or "": the first word after c's path that is
// not a flag or the value of the logging flags.
func (a *App) unknownCommand(c *cobra.Command) string {
	if c.Annotations[groupAnnotation] == "" {
		return ""
	}
	path := strings.Fields(c.CommandPath())[1:]
	var words []string
	for i := 0; i < len(a.args); i++ {
		w := a.args[i]
		switch {
		case w == "--":
			i = len(a.args)
		case w == "--log-format" || w == "--log-level":
			i++
		case !strings.HasPrefix(w, "-"):
			words = append(words, w)
		}
	}
	if len(words) <= len(path) {
		return ""
	}
	next := words[len(path)]
	for _, s := range c.Commands() {
		if s.Name() == next || slices.Contains(s.Aliases, next) {
			return ""
		}
	}
	return next
}

// execute runs one command line.
func (a *App) execute(ctx context.Context, args []string) error {
	a.args = args
	if len(a.cfg.Projections) == 0 {
		return errors.New("cli: Config.Projections is empty")
	}
	if args == nil {
		args = []string{} // nil makes cobra read os.Args
	}
	root := a.root()
	root.SetArgs(args)
	// The variables stand in for flags not on the command line: set them
	// first, and let parsing override them.
	if cmd, _, err := root.Find(args); err == nil {
		if err := clikit.ApplyEnv(cmd, a.getenv); err != nil {
			return a.usage(cmd, err)
		}
	}
	// Wrap every command's RunE: an error before it ran is the command
	// line's (cobra's own argument and command checks).
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				a.ran = true
				return run(cmd, args)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	cmd, err := root.ExecuteContextC(ctx)
	a.json = logsJSON(cmd, args, a.getenv)
	switch {
	case err == nil:
		return nil
	case !a.ran || errors.Is(err, ErrUsage):
		return a.usage(cmd, err)
	}
	return err
}

// usage makes err a usage error of cmd that says where the help is.
func (a *App) usage(cmd *cobra.Command, err error) error {
	path := a.name
	if cmd != nil {
		path = cmd.CommandPath()
	}
	if !errors.Is(err, ErrUsage) {
		err = clikit.Usagef("%v", err)
	}
	return fmt.Errorf("%s: %w (see '%s --help')", path, err, path)
}

// logsJSON tells whether the command ran with JSON logs: its --log-format,
// or, when the command line named no command that has one (an unknown
// command, a misspelt flag before the command), the --log-format the
// command line gives anyway, or the variable.
func logsJSON(cmd *cobra.Command, args []string, getenv func(string) string) bool {
	if cmd != nil {
		if f := cmd.Flags().Lookup("log-format"); f != nil && f.Changed {
			return f.Value.String() == "json"
		}
	}
	format := getenv(clikit.EnvLogFormat)
	for i, arg := range args {
		if arg == "--" {
			break
		}
		if v, ok := strings.CutPrefix(arg, "--log-format="); ok {
			format = v
		} else if arg == "--log-format" && i+1 < len(args) {
			format = args[i+1]
		}
	}
	return format == "json"
}

// exitCode prints err (once, with the program's name once) and returns the
// exit status it means.
func (a *App) exitCode(err error) int {
	code := ExitFailure
	msg := ""
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		code, msg = ExitUsage, err.Error() // starts with the command's path
	case errors.Is(err, ErrIncomplete):
		code, msg = ExitIncomplete, a.name+": "+err.Error()
	default:
		msg = a.name + ": error: " + err.Error()
	}
	if a.json {
		// The program's name alone adds nothing to a log line.
		slog.New(slog.NewJSONHandler(a.stderr, nil)).Error(strings.TrimPrefix(err.Error(), a.name+": "), "exit_code", code)
		return code
	}
	fmt.Fprintln(a.stderr, msg)
	return code
}
