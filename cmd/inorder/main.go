// Command inorder runs inorder's projection workers, serves their read
// models over HTTP and gives operators the tools to inspect and unblock
// them. It carries the payments ledger example (package examples/ledger);
// build your own binary with your projections through package cli.
//
// Run "inorder --help" for the commands, "inorder demo" for a tour.
package main

import (
	"os"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

func main() {
	payments := ledger.New(nil)
	os.Exit(cli.Main(cli.Config{
		Projections: []projection.Projection{payments},
		Demo:        cli.LedgerDemo(payments),
	}))
}
