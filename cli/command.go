package cli

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
)

// options is implemented by every command's options type: validate checks
// the flags and positional arguments once they are parsed, before anything
// connects anywhere.
type options interface {
	validate(args []string) error
}

// leaf builds a runnable command: bind defines its flags on the command's
// flag set and returns its options, which are validated before run.
func leaf[O options](use, short, long string, bind func(fs *pflag.FlagSet) O, run func(ctx context.Context, o O) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ArbitraryArgs}
	o := bind(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := o.validate(args); err != nil {
			return err
		}
		return run(cmd.Context(), o)
	}
	return cmd
}

// group builds a command that only holds subcommands.
func (a *App) group(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ArbitraryArgs, Annotations: map[string]string{groupAnnotation: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if a.getenv(clikit.EnvLogFormat) != "json" {
					_ = cmd.Usage() // the subcommands, on stderr
				}
				return clikit.Usagef("missing command")
			}
			return clikit.Usagef("unknown command %q", args[0])
		}}
	cmd.AddCommand(subs...)
	return cmd
}

// groupAnnotation marks the commands that only hold subcommands (group).
const groupAnnotation = "inorder_group"
