// Command inorder runs inorder's projection workers, serves their read
// models over HTTP and gives operators the tools to inspect and unblock
// them. It carries the payments ledger example (package examples/ledger)
// and the demo; build your own binary with your projections through
// package cli.
//
// Run "inorder --help" for the commands, "inorder demo" for a tour.
//
// With INORDER_LEDGER_WEBHOOK_URL set, the ledger notifies that URL of every
// settled payment ("payment settled" webhooks, package effects): run
// performs them, 'effects' lists and retries them.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/demo"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/kafka"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/pgtable"
)

// version is stamped by release builds: -ldflags "-X main.version=v1.2.3".
var version string

// EnvWebhookURL names the variable that enables the ledger's settlement
// webhooks.
const EnvWebhookURL = "INORDER_LEDGER_WEBHOOK_URL"

func main() {
	payments := ledger.New(nil)
	var handlers []effects.Handler
	if url := os.Getenv(EnvWebhookURL); url != "" {
		handlers = append(handlers, &ledger.Webhook{URL: url})
	}
	os.Exit(cli.Main(cli.Config{
		Version:     version,
		Projections: []projection.Projection{payments},
		Sources:     []source.Driver{esdb.Driver(), pgtable.Driver(), kafka.Driver(), nats.Driver()},
		Effects:     handlers,
		Commands:    []func(*cli.App) *cobra.Command{demo.Ledger(payments)},
	}))
}
