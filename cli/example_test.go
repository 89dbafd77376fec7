package cli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// A binary of your own: every command of inorder, for your projections.
// This is the whole main function.
func ExampleMain() {
	payments := ledger.New(&ledger.Options{Name: "payments"})
	os.Exit(cli.Main(cli.Config{
		Name:        "payments-inorder",
		Projections: []projection.Projection{payments},
		Demo:        cli.LedgerDemo(payments),
	}))
}

// Run runs one command line in-process, for tests and tools.
func ExampleRun() {
	cfg := cli.Config{
		Projections: []projection.Projection{ledger.New(nil)},
		Stdout:      os.Stdout,
	}
	err := cli.Run(context.Background(), cfg, []string{"conflicts", "--help"})
	fmt.Println("error:", err)
	// Output:
	// Usage: inorder conflicts <command> [flags] [arguments]
	//
	// A conflict is a delivery that claims an (aggregate, version) already held by
	// a different event. It is recorded, never applied.
	//
	// Commands:
	//   list  list deliveries that reuse a version with a different id or payload
	//
	// Run 'inorder conflicts <command> --help' for what a command does and what it changes.
	// error: <nil>
}
