package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
)

// A binary of your own: every command of inorder, for your projections,
// and a command of yours. This is the whole main function.
func ExampleMain() {
	payments := ledger.New(&ledger.Options{Name: "payments"})
	hello := func(app *cli.App) *cobra.Command {
		return &cobra.Command{Use: "hello", Short: "say hello",
			Long: "Says hello. Read-only.",
			RunE: func(cmd *cobra.Command, args []string) error {
				_, err := fmt.Fprintf(app.Stdout(), "hello from %s\n", app.Name())
				return err
			}}
	}
	os.Exit(cli.Main(cli.Config{
		Name:        "payments-inorder",
		Projections: []projection.Projection{payments},
		Sources:     []source.Driver{esdb.Driver()},
		Commands:    []func(*cli.App) *cobra.Command{hello},
	}))
}

// Run runs one command line in-process, for tests and tools.
func ExampleRun() {
	cfg := cli.Config{
		Projections: []projection.Projection{ledger.New(nil)},
		Stdout:      os.Stdout,
	}
	err := cli.Run(context.Background(), cfg, []string{"help", "conflicts"})
	fmt.Println("error:", err)
	// Output:
	// A conflict is a delivery that claims an (aggregate, version) already held by
	// a different event. It is recorded, never applied, and counts as open until
	// an operator acknowledges it.
	//
	// Usage:
	//   inorder conflicts [flags]
	//   inorder conflicts [command]
	//
	// Available Commands:
	//   ack         acknowledge a conflict: an operator has dealt with it
	//   list        list deliveries that reuse a version with a different id or payload
	//
	// Flags:
	//   -h, --help   help for conflicts
	//
	// Use "inorder conflicts [command] --help" for more information about a command.
	// error: <nil>
}
