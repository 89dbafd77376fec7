package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
)

// healthcheckOptions configures healthcheck.
type healthcheckOptions struct {
	Addr    string
	Live    bool
	Timeout time.Duration
}

func (o *healthcheckOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return clikit.Usagef("invalid --http-addr %q: %v", o.Addr, err)
	}
	if o.Timeout <= 0 {
		return clikit.Usagef("--timeout must be positive")
	}
	return nil
}

// healthcheckCmd probes a running run or serve.
type healthcheckCmd struct{ a *App }

func (c *healthcheckCmd) command() *cobra.Command {
	return leaf("healthcheck", "probe the /readyz (or /healthz) of a running 'run' or 'serve': exit 0 if ready",
		`Asks the HTTP server of a running 'run' or 'serve' on --http-addr whether it
is ready (GET /readyz: the workers run, the database answers, the schema is
migrated, the lag is within --ready-max-lag) or, with --live, alive (GET
/healthz). Exits 0 when it is, 1 when it is not, printing the reason. Made
for container health checks: the image has no curl. An unspecified host
(":8080", "0.0.0.0:8080") is probed on 127.0.0.1.

Read-only.`,
		func(fs *pflag.FlagSet) *healthcheckOptions {
			o := &healthcheckOptions{}
			fs.StringVar(&o.Addr, "http-addr", clikit.DefaultHTTPAddr, "`address` the server listens on")
			fs.BoolVar(&o.Live, "live", false, "probe liveness (/healthz) instead of readiness")
			fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "give up after this `duration`")
			return o
		}, c.Run)
}

// Run probes the server.
func (c *healthcheckCmd) Run(ctx context.Context, o *healthcheckOptions) error {
	host, port, _ := net.SplitHostPort(o.Addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	path := "/readyz"
	if o.Live {
		path = "/healthz"
	}
	url := "http://" + net.JoinHostPort(host, port) + path
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		msg := string(body)
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return fmt.Errorf("%s: %s: %s", url, resp.Status, msg)
	}
	_, err = fmt.Fprintf(c.a.stdout, "%s: ok\n", url)
	return err
}
