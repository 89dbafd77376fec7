// Command inorder runs inorder's projection workers, serves their read
// models over HTTP and gives operators the tools to inspect and unblock
// them. It carries the payments ledger example (package examples/ledger)
// and the demo; build your own binary with your projections through
// package cli.
//
// Run "inorder --help" for the commands, "inorder demo" for a tour.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/demo"
	"github.com/inorder/inorder/projection"
)

// version is stamped by release builds: -ldflags "-X main.version=v1.2.3".
var version string

func main() {
	payments := ledger.New(nil)
	os.Exit(cli.Main(cli.Config{
		Version:     version,
		Projections: []projection.Projection{payments},
		Commands:    []func(*cli.App) *cobra.Command{demo.Ledger(payments)},
	}))
}
