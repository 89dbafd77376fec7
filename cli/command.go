package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// options is implemented by every command's options type: validate checks
// the flags and positional arguments once they are parsed.
type options interface {
	validate(args []string) error
}

// command is one node of the command tree: a group of subcommands or a
// runnable command.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string // one line, for the parent's list
	help    string // what it does and what it changes
	sub     []*command
	// bind defines the command's flags on fs and returns the function that
	// validates the options and runs the command.
	bind func(fs *flagSet) func(ctx context.Context, args []string) error
}

// leaf builds a runnable command from an options constructor (which binds
// the flags) and a Run method.
func leaf[O options](name, args, summary, help string, bind func(fs *flagSet) O, runFn func(ctx context.Context, o O) error) *command {
	return &command{name: name, args: args, summary: summary, help: help,
		bind: func(fs *flagSet) func(ctx context.Context, args []string) error {
			o := bind(fs)
			return func(ctx context.Context, args []string) error {
				if err := o.validate(args); err != nil {
					return err
				}
				return runFn(ctx, o)
			}
		}}
}

// dispatch finds the subcommand named by args and runs it.
func (c *command) dispatch(ctx context.Context, a *app, path []string, args []string) error {
	path = append(path, c.name)
	if c.bind != nil && len(args) > 0 {
		for _, s := range c.sub {
			if s.name == args[0] {
				return s.dispatch(ctx, a, path, args[1:])
			}
		}
	}
	if c.bind == nil {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			c.printGroupHelp(a.stdout, path)
			if len(args) == 0 {
				return usageErrorf("%s: missing command", strings.Join(path, " "))
			}
			return errHelp
		}
		for _, s := range c.sub {
			if s.name == args[0] {
				return s.dispatch(ctx, a, path, args[1:])
			}
		}
		return usageErrorf("unknown command %q for %q (see %s --help)", args[0], strings.Join(path, " "), strings.Join(path, " "))
	}
	fs := newFlagSet(strings.Join(path, " "), a.getenv)
	runFn := c.bind(fs)
	if err := fs.applyEnv(); err != nil {
		return err
	}
	pos, err := fs.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(a.stdout, path, fs)
		return errHelp
	}
	if err != nil {
		return usageErrorf("%s: %v (see %s --help)", strings.Join(path, " "), err, strings.Join(path, " "))
	}
	if err := runFn(ctx, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return usageErrorf("%s: %s (see %s --help)", strings.Join(path, " "), ue.msg, strings.Join(path, " "))
		}
		return err
	}
	return nil
}

func (c *command) printGroupHelp(w io.Writer, path []string) {
	fmt.Fprintf(w, "Usage: %s <command> [flags] [arguments]\n\n", strings.Join(path, " "))
	if c.help != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(c.help))
	}
	fmt.Fprintln(w, "Commands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range c.sub {
		fmt.Fprintf(tw, "  %s\t%s\n", s.name, s.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nRun '%s <command> --help' for what a command does and what it changes.\n", strings.Join(path, " "))
}

func (c *command) printHelp(w io.Writer, path []string, fs *flagSet) {
	usage := strings.Join(path, " ") + " [flags]"
	if c.args != "" {
		usage += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", usage, strings.TrimSpace(c.help))
	var any bool
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if !any {
			fmt.Fprintln(w, "\nFlags:")
			any = true
		}
		name, usage := flag.UnquoteUsage(f)
		arg := "--" + f.Name
		if name != "" {
			arg += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		if env := fs.env[f.Name]; env != "" {
			usage += " [$" + env + "]"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", arg, usage)
	})
	tw.Flush()
}

// usageError is an invalid command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return ErrUsage }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// flagSet is a flag.FlagSet whose flags may have environment variables as
// defaults.
type flagSet struct {
	*flag.FlagSet
	env    map[string]string // flag name → environment variable
	getenv func(string) string
}

func newFlagSet(name string, getenv func(string) string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &flagSet{FlagSet: fs, env: map[string]string{}, getenv: getenv}
}

// withEnv records that environment variable env supplies flag name when the
// flag is not given.
func (fs *flagSet) withEnv(name, env string) { fs.env[name] = env }

func (fs *flagSet) stringVar(p *string, name, env, def, usage string) {
	fs.StringVar(p, name, def, usage)
	fs.withEnv(name, env)
}

func (fs *flagSet) intVar(p *int, name, env string, def int, usage string) {
	fs.IntVar(p, name, def, usage)
	fs.withEnv(name, env)
}

func (fs *flagSet) durationVar(p *time.Duration, name, env string, def time.Duration, usage string) {
	fs.DurationVar(p, name, def, usage)
	fs.withEnv(name, env)
}

func (fs *flagSet) boolVar(p *bool, name, env string, def bool, usage string) {
	fs.BoolVar(p, name, def, usage)
	fs.withEnv(name, env)
}

// applyEnv sets every flag whose environment variable is set.
func (fs *flagSet) applyEnv() error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := fs.env[f.Name]
		if env == "" || err != nil {
			return
		}
		if v := fs.getenv(env); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = usageErrorf("invalid $%s=%q: %v", env, v, serr)
			}
		}
	})
	return err
}

// parse parses args, allowing flags after positional arguments
// ("rebuild ledger --batch-size 500"). Everything after "--" is
// positional.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos, rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, rest...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// noArgs is the validate step of commands without positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}

// oneArg returns the single positional argument.
func oneArg(args []string, what string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usageErrorf("missing %s", what)
	case len(args) > 1:
		return "", usageErrorf("unexpected argument %q", args[1])
	case args[0] == "":
		return "", usageErrorf("empty %s", what)
	}
	return args[0], nil
}
