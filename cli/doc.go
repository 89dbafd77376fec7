// Package cli is the inorder command line: the projection workers (run), the
// read-model HTTP API (serve), the operator tools (status, parked,
// quarantine, conflicts, rejected), rebuild, migrate and the demo.
//
// The shipped binary, cmd/inorder, is a few lines around [Main] with the
// ledger example. A team with its own projections builds its own binary the
// same way, and gets every command for its projections:
//
//	func main() {
//		orders := myorders.New()
//		os.Exit(cli.Main(cli.Config{
//			Name:        "orders-inorder",
//			Projections: []projection.Projection{orders},
//			Processor:   projection.Config{MaxAttempts: 5},
//		}))
//	}
//
// # Commands
//
// Each command is a small struct with a validated options type and a Run
// method. Run "inorder <command> --help" for what a command does and what it
// changes:
//
//	migrate [--dry-run] | migrate status   apply / list inorder's migrations, create read-model tables
//	run                                    workers against EventStoreDB (catch-up or persistent)
//	serve                                  the read-model HTTP API alone
//	status                                 per projection: applied, parked, quarantined, conflicts
//	parked list|show|repair|declare-gap    aggregates waiting for missing versions
//	quarantine list|retry|skip             events whose handler failed for good
//	conflicts list                         deliveries reusing a version with another payload
//	rejected list|replay                   deliveries that failed validation
//	rebuild <projection>                   empty a read model and replay the stream into it
//	demo                                   the whole pipeline on a generated workload (Config.Demo)
//
// Operator commands print aligned tables, or JSON with --json (the Report
// types of this package).
//
// # Configuration
//
// Every flag has a default; most can also be set from the environment
// (DATABASE_URL, ESDB_URL, INORDER_SCHEMA, INORDER_HTTP_ADDR,
// INORDER_LOG_FORMAT, …; each flag's help names its variable). A flag on the
// command line wins over the environment.
//
// The projections' read-model tables are created in the connection's
// search_path (add "?search_path=myschema" or "options=-c search_path=…" to
// DATABASE_URL to choose it); inorder's own tables go to --schema.
//
// # Signals
//
// [Main] handles SIGINT and SIGTERM: the first asks the command to stop
// gracefully — run stops receiving, commits and acknowledges the batches in
// flight and saves its checkpoint; the HTTP server finishes its requests —
// and the second stops it at once (uncommitted work rolls back and is
// delivered again).
package cli
