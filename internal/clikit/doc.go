// Package clikit is the machinery the inorder command line shares between
// package cli and the commands a binary adds to it (the demo, the effects
// commands): usage errors, the flags' environment variables, logging,
// tables and JSON output, progress bars, connecting to PostgreSQL and
// serving the HTTP API with metrics.
//
// It is internal: teams extend the command line through cli.Config.Commands
// and cli.App.
package clikit
