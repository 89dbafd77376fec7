package e2eproc

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// Flags are the flags every end-to-end command takes.
type Flags struct {
	Inorder, DatabaseURL, Extra string
	Events, Versions, Consumers int
	Workers, BatchSize          int
	Seed                        uint64
	Timeout                     time.Duration
	Keep                        bool
}

// Bind registers the flags on fs; consumers, events and args are the help
// of -consumers, -events and -args, which say what the command does with
// them.
func (f *Flags) Bind(fs *flag.FlagSet, consumers, events, args string) {
	fs.StringVar(&f.Inorder, "inorder", "", "the inorder binary (go build -o … ./cmd/inorder); required")
	fs.StringVar(&f.DatabaseURL, "database-url", DatabaseURL(), "PostgreSQL")
	fs.IntVar(&f.Consumers, "consumers", 1, consumers)
	fs.IntVar(&f.Events, "events", 100000, events)
	fs.IntVar(&f.Versions, "versions", 8, "versions per payment")
	fs.IntVar(&f.Workers, "workers", 4, "--workers of each process")
	fs.IntVar(&f.BatchSize, "batch-size", 500, "--batch-size of each process")
	fs.StringVar(&f.Extra, "args", "", args)
	fs.Uint64Var(&f.Seed, "seed", 1, "workload seed")
	fs.DurationVar(&f.Timeout, "timeout", 30*time.Minute, "give up after")
	fs.BoolVar(&f.Keep, "keep", false, "keep the schema")
}

// Missing reports, on stderr as command, a flag the command cannot run
// without (-inorder).
func (f *Flags) Missing(command string) bool {
	if f.Inorder == "" {
		fmt.Fprintf(os.Stderr, "%s: -inorder is required\n", command)
		return true
	}
	return false
}

// DatabaseURL is the default -database-url: $DATABASE_URL, else the local
// server.
func DatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}
