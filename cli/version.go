package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
)

// version returns the binary's build information (Config.Version wins).
func (a *App) version() clikit.Build { return clikit.ReadBuild(a.cfg.Version) }

// versionOptions configures version.
type versionOptions struct{ out clikit.OutputOptions }

func (o *versionOptions) validate(args []string) error { return clikit.NoArgs(args) }

// versionCmd prints the version.
type versionCmd struct{ a *App }

func (c *versionCmd) command() *cobra.Command {
	return leaf("version", "print the version and VCS revision of this binary",
		`Prints the module version and the VCS revision this binary was built from
(from the Go build information, or as stamped at build time), and the Go
version that built it. Same as --version. Read-only.`,
		func(fs *pflag.FlagSet) *versionOptions {
			o := &versionOptions{}
			clikit.BindOutput(fs, &o.out)
			return o
		}, c.Run)
}

// Run prints the version.
func (c *versionCmd) Run(_ context.Context, o *versionOptions) error {
	b := c.a.version()
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, b)
	}
	_, err := fmt.Fprintf(c.a.stdout, "%s %s\n", c.a.name, b)
	return err
}

// tracing returns the process's tracing, exporting when the OTEL_*
// variables ask for it.
func (a *App) tracing(ctx context.Context, logger *slog.Logger) (*clikit.Tracing, error) {
	t, err := clikit.NewTracing(ctx, a.getenv, a.name, a.version().Version)
	if err != nil {
		return nil, err
	}
	if t.Enabled() {
		logger.Info("tracing: exporting spans over OTLP")
	}
	a.traces = t // the effects client made after it traces its calls
	return t, nil
}

// shutdownTracing flushes the spans not exported yet, for at most 5 s.
func shutdownTracing(t *clikit.Tracing, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		logger.Warn("tracing: flush spans", "error", err)
	}
}
