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

// noDryRun are the commands that change something and have no --dry-run:
// the workers and servers, and the rebuild. (The effects commands are the
// effects package's, which adds its dry runs.)
var noDryRun = map[string]bool{"run": true, "serve": true, "rebuild": true, "effects work": true,
	"effects retry": true, "effects cancel": true, "effects reconcile": true}

// onGenerations are the commands that list or act on the rows of a
// projection's generation.
var onGenerations = map[string]bool{"parked list": true, "parked show": true, "parked repair": true, "parked declare-gap": true,
	"quarantine list": true, "quarantine retry": true, "quarantine skip": true, "conflicts list": true, "oplog": true,
	"rebuild drop": true}

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
			// Every command that changes something can say what it would
			// do first, but the long-running ones (and a rebuild, which
			// builds a generation that is only switched in once verified).
			if strings.Contains(h, "Changes:") && !noDryRun[p] {
				require.Contains(t, h, "--dry-run", "%s changes something: it has --dry-run", p)
			}
			// Every command on a projection's rows names the generation.
			if onGenerations[p] {
				require.Contains(t, h, "--generation", "%s acts on or lists a generation", p)
			}
			require.Equal(t, h, help(append([]string{"help"}, strings.Fields(p)...)...), "help <command> prints the same")
		})
	}
	require.ElementsMatch(t, []string{
		"migrate", "migrate status", "run", "serve", "status",
		"parked list", "parked show", "parked repair", "parked declare-gap",
		"quarantine list", "quarantine retry", "quarantine skip",
		"conflicts list", "conflicts ack", "oplog", "healthcheck", "rejected list", "rejected replay", "rejected dismiss",
		"rebuild", "rebuild status", "rebuild rollback", "rebuild drop", "version", "help",
		"effects list", "effects show", "effects retry", "effects cancel", "effects reconcile", "effects work",
		"completion bash", "completion zsh", "completion fish", "completion powershell",
	}, paths, "every command is covered")
}
