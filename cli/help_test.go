package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// TestEveryCommandSaysWhatItChanges walks the command tree: every command's
// --help prints its usage, what it does, and what it changes (or that it is
// read-only).
func TestEveryCommandSaysWhatItChanges(t *testing.T) {
	t.Parallel()
	p := ledger.New(nil)
	cfg := Config{Projections: []projection.Projection{p}, Demo: LedgerDemo(p), Getenv: func(string) string { return "" }}
	var walk func(c *command, path []string)
	n := 0
	walk = func(c *command, path []string) {
		path = append(path, c.name)
		if c.bind != nil {
			n++
			t.Run(strings.Join(path[1:], "_"), func(t *testing.T) {
				var out bytes.Buffer
				cfg := cfg
				cfg.Stdout, cfg.Stderr = &out, &out
				require.NoError(t, Run(t.Context(), cfg, append(path[1:], "--help")))
				help := out.String()
				require.Contains(t, help, "Usage: inorder "+strings.Join(path[1:], " "))
				require.True(t, strings.Contains(help, "Changes:") || strings.Contains(help, "Read-only"),
					"the help says what the command changes:\n%s", help)
				require.Contains(t, help, "Flags:")
			})
		}
		for _, s := range c.sub {
			walk(s, path)
		}
	}
	walk(newApp(cfg).root(), nil)
	require.Equal(t, 17, n, "every command is covered")
}
