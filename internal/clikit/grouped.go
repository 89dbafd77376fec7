package clikit

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// GroupedUsage is a cobra usage function that prints like cobra's default
// but for the flags, which it splits into the command's own ("Flags:") and
// a section per group (SetFlagGroup): the flags of each source. Set it
// with cmd.SetUsageFunc; a command's subcommands inherit it.
func GroupedUsage(c *cobra.Command) error {
	var b strings.Builder
	b.WriteString("Usage:")
	if c.Runnable() {
		b.WriteString("\n  " + c.UseLine())
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n  " + c.CommandPath() + " [command]")
	}
	if len(c.Aliases) > 0 {
		b.WriteString("\n\nAliases:\n  " + c.NameAndAliases())
	}
	if c.HasExample() {
		b.WriteString("\n\nExamples:\n" + c.Example)
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n\nAvailable Commands:")
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() || s.Name() == "help" {
				fmt.Fprintf(&b, "\n  %-*s %s", s.NamePadding(), s.Name(), s.Short)
			}
		}
	}
	if c.HasAvailableLocalFlags() {
		own := pflag.NewFlagSet("own", pflag.ContinueOnError)
		groups := map[string]*pflag.FlagSet{}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			g := FlagGroup(f)
			if g == "" {
				own.AddFlag(f)
				return
			}
			if groups[g] == nil {
				groups[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
			}
			groups[g].AddFlag(f)
		})
		b.WriteString("\n\nFlags:\n" + strings.TrimRight(own.FlagUsages(), " \n"))
		for _, g := range slices.Sorted(maps.Keys(groups)) {
			b.WriteString("\n\n" + g + " flags:\n" + strings.TrimRight(groups[g].FlagUsages(), " \n"))
		}
	}
	if c.HasAvailableInheritedFlags() {
		b.WriteString("\n\nGlobal Flags:\n" + strings.TrimRight(c.InheritedFlags().FlagUsages(), " \n"))
	}
	if c.HasAvailableSubCommands() {
		b.WriteString("\n\nUse \"" + c.CommandPath() + " [command] --help\" for more information about a command.")
	}
	b.WriteString("\n")
	_, err := fmt.Fprint(c.OutOrStderr(), b.String())
	return err
}
