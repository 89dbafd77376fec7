package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
)

// TestEveryCommandSaysWhatItChanges walks the command tree: every command's
// --help prints its usage, what it does, and what it changes (or that it is
// read-only); "inorder help <command>" prints the same.
func TestEveryCommandSaysWhatItChanges(t *testing.T) {
	t.Parallel()
	cfg := Config{Projections: []projection.Projection{ledger.New(nil)}, Sources: []source.Driver{esdb.Driver()}, Getenv: func(string) string { return "" }}
	var paths []string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Runnable() && len(c.Commands()) == 0 || c.Name() == "migrate" || c.Name() == "rebuild" {
			paths = append(paths, strings.Join(path, " "))
		}
		for _, s := range c.Commands() {
			walk(s, append(path[:len(path):len(path)], s.Name()))
		}
	}
	walk(newApp(cfg, context.Background()).root(), nil)
	for _, p := range paths {
		t.Run(strings.ReplaceAll(p, " ", "_"), func(t *testing.T) {
			t.Parallel()
			help := func(args ...string) string {
				var out bytes.Buffer
				cfg := cfg
				cfg.Stdout, cfg.Stderr = &out, &out
				require.NoError(t, Run(t.Context(), cfg, args))
				return out.String()
			}
			h := help(append(strings.Fields(p), "--help")...)
			require.Contains(t, h, "Usage:\n  inorder "+p)
			require.True(t, strings.Contains(h, "Changes:") || strings.Contains(h, "Read-only"),
				"the help says what the command changes:\n%s", h)
			require.Contains(t, h, "Flags:")
			require.Equal(t, h, help(append([]string{"help"}, strings.Fields(p)...)...), "help <command> prints the same")
		})
	}
	require.ElementsMatch(t, []string{
		"migrate", "migrate status", "run", "serve", "status",
		"parked list", "parked show", "parked repair", "parked declare-gap",
		"quarantine list", "quarantine retry", "quarantine skip",
		"conflicts list", "conflicts ack", "oplog", "healthcheck", "rejected list", "rejected replay",
		"rebuild", "rebuild status", "rebuild rollback", "rebuild drop", "version", "help",
		"effects list", "effects show", "effects retry", "effects cancel", "effects reconcile", "effects work",
		"completion bash", "completion zsh", "completion fish", "completion powershell",
	}, paths, "every command is covered")
}
