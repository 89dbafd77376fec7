// Package cli is the inorder command line, built on cobra: the projection
// workers (run), the read-model HTTP API (serve), the operator tools
// (status, parked, quarantine, conflicts, rejected), rebuild, migrate,
// version and shell completion.
//
// The shipped binary, cmd/inorder, is a few lines around [Main] with the
// ledger example and the demo. A team with its own projections builds its
// own binary the same way, gets every command for its projections, and
// adds commands of its own through [Config].Commands (the shipped binary
// adds the demo that way):
//
//	func main() {
//		orders := myorders.New()
//		os.Exit(cli.Main(cli.Config{
//			Name:        "orders-inorder",
//			Projections: []projection.Projection{orders},
//			Sources:     []source.Driver{esdb.Driver(), pgtable.Driver()},
//			Processor:   projection.Config{MaxAttempts: 5},
//			Commands:    []func(*cli.App) *cobra.Command{myCommand},
//		}))
//	}
//
// A command of a binary's own receives the [App]: its output writers, the
// first-signal [App.Drain] channel, the projections. Its flags get their
// environment variables like the built-in ones, and an error wrapping
// [ErrUsage] (see [Usagef]) exits with status 2.
//
// This package links neither the demo nor test servers (the demo lives in
// the module's internal/demo), nor any source: a binary lists the sources
// it reads in [Config].Sources, and the library links only those.
//
// # Sources
//
// run, rebuild and parked repair read the source --source names by URL
// (--esdb-url, the older flag, is the same as --source with an esdb:// URL):
// the scheme chooses the driver (a [source.Driver]: esdb://, postgres://…),
// whose own flags follow the command's in the help, in a group of their
// own. Every source runs through the same [source.Feed], so the metrics
// (inorder_source_lag_events, inorder_source_lag_seconds), readiness,
// drain, rebuild and status work alike.
//
// # Commands
//
// Each command is a small struct with a validated options type and a Run
// method; options are validated before anything connects. Run
// "inorder help <command>" (or "inorder <command> --help") for what a
// command does and what it changes:
//
//	migrate [--dry-run] | migrate status   apply / list inorder's migrations, create read-model tables
//	run                                    workers against a source (--source esdb://…, postgres://…)
//	serve                                  the read-model HTTP API alone
//	status                                 per projection: applied, parked, quarantined, conflicts
//	parked list|show|repair|declare-gap    aggregates waiting for missing versions
//	quarantine list|retry|skip             events whose handler failed for good
//	conflicts list|ack                     deliveries reusing a version with another payload
//	rejected list|replay                   deliveries that failed validation
//	oplog                                  the operator log: decisions and source findings
//	rebuild <projection> [--yes]           empty a read model and replay the stream into it
//	healthcheck [--live]                   probe /readyz (/healthz) of a running run or serve
//	version                                the module version and VCS revision (also --version)
//	completion bash|zsh|fish|powershell    shell completion scripts
//
// Operator commands print aligned tables, or JSON with --json: the view
// types of package projection, the same JSON as the HTTP API.
//
// # Exit status
//
// 0 success; 1 failure; 2 invalid command line (unknown command or flag,
// invalid value, missing argument); 3 done but incomplete (parked repair
// found versions missing at the source).
//
// # Configuration
//
// Every flag has a default; most can also be set from the environment
// (DATABASE_URL, INORDER_SOURCE, ESDB_URL, INORDER_SCHEMA, INORDER_HTTP_ADDR,
// INORDER_LOG_FORMAT, …; each flag's help names its variable). One table
// names the variable of each flag name, in every command alike. A flag on
// the command line wins over the environment.
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
//
// # Files
//
// From the bottom up: cli.go is the package's face (Config, App, Main,
// Run, the exit statuses); command.go the shape every command shares
// (leaf, group); source.go the --source flag and its drivers;
// effects_client.go the effects client and its --effects-* flags; open.go
// the schema check and the processor a command opens; operator.go what the
// operator commands share (their flags, listing, acting, reporting). Each
// command, or group of commands, has a file of its own above them: run.go,
// serve.go, migrate.go, status.go, parked.go, repair.go, quarantine.go,
// conflicts.go, rejected.go, oplog.go, rebuild.go, effects.go (with
// effects_act.go and effects_work.go), healthcheck.go, version.go. root.go,
// on top, builds the command tree and runs a command line.
package cli
