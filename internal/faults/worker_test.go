package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// The worker processes are the test binary re-executed with these variables
// set; TestMain then runs workerMain instead of the tests.
const (
	envWorker           = "INORDER_FAULTS_WORKER" // the worker's number
	envWorkerURL        = "INORDER_FAULTS_URL"
	envWorkerSchema     = "INORDER_FAULTS_SCHEMA"
	envWorkerGoroutines = "INORDER_FAULTS_GOROUTINES"

	// workerApp is the application_name of the workers' connections: the
	// parent terminates their backends by it.
	workerApp = "inorder-faults-worker"
)

// delivery is one batch sent to a worker: a line of JSON on its stdin.
type delivery struct {
	ID     int               `json:"id"`
	Events []aggregate.Event `json:"events"`
}

// reply is a worker's answer to a delivery: a line of JSON on its stdout,
// written once Process returned.
type reply struct {
	ID int `json:"id"`
	// Err is the error Process returned; empty when it committed.
	Err string `json:"err,omitempty"`
	// Outcomes counts the deliveries by outcome.
	Outcomes map[string]int `json:"outcomes,omitempty"`
	// Attempts is the number of transactions Process tried.
	Attempts int `json:"attempts"`
	// Millis is Process's wall time.
	Millis int64 `json:"ms"`
}

// audit is the projection that proves exactly once: one row per
// application of an event, in a table without any unique constraint, so a
// second application of the same event would show as a second row.
type audit struct{}

func (audit) Name() string { return "audit" }

func (audit) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS audit (
  aggregate  text NOT NULL,
  version    bigint NOT NULL,
  event_id   text NOT NULL,
  txid       xid8 NOT NULL DEFAULT pg_current_xact_id(),
  applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`)
	return err
}

func (audit) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE audit`)
	return err
}

func (audit) Apply(_ context.Context, tx *projection.Tx, e aggregate.Event) error {
	tx.Queue(`INSERT INTO audit (aggregate, version, event_id) VALUES ($1, $2, $3)`, e.Aggregate, e.Version, e.StableID())
	return nil
}

// newProcessor returns the processor of the suite — the ledger (a batch
// handler) and the audit (an event handler) in one transaction — with the
// default retry policy: what the suite checks is what a caller with the
// defaults sees.
func newProcessor(pool *pgxpool.Pool, schema string, logger *slog.Logger, onBatch func(projection.BatchInfo)) (*projection.Processor, error) {
	return projection.New(pool, &projection.Config{Schema: schema, Logger: logger, OnBatch: onBatch}, ledger.New(nil), audit{})
}

// workerMain is a worker process: it reads deliveries from stdin, runs each
// through Process on one of its goroutines and writes a reply per delivery
// to stdout. It ends when stdin ends and every delivery is answered.
func workerMain() int {
	if err := work(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func work(ctx context.Context, in io.Reader, out io.Writer) error {
	goroutines, err := strconv.Atoi(os.Getenv(envWorkerGoroutines))
	if err != nil {
		return fmt.Errorf("%s: %w", envWorkerGoroutines, err)
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv(envWorkerURL))
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(goroutines)
	// No ping: the server may be restarting right now; Process copes.
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var attempts sync.Map // Batch.Source → BatchInfo.Attempts
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	proc, err := newProcessor(pool, os.Getenv(envWorkerSchema), logger, func(bi projection.BatchInfo) {
		attempts.Store(bi.Source, bi.Attempts)
	})
	if err != nil {
		return err
	}

	var mu sync.Mutex
	enc := json.NewEncoder(out)
	deliveries := make(chan delivery)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for d := range deliveries {
				source := strconv.Itoa(d.ID)
				began := time.Now()
				res, err := proc.Process(ctx, projection.Batch{Events: d.Events, Source: source})
				r := reply{ID: d.ID, Millis: time.Since(began).Milliseconds()}
				if n, ok := attempts.LoadAndDelete(source); ok {
					r.Attempts = n.(int)
				}
				if err != nil {
					r.Err = err.Error()
				} else {
					r.Outcomes = map[string]int{}
					for _, x := range res {
						r.Outcomes[x.Outcome.String()]++
					}
				}
				mu.Lock()
				err = enc.Encode(r)
				mu.Unlock()
				if err != nil {
					panic(fmt.Sprintf("write reply: %v", err)) // the parent is gone
				}
			}
		})
	}
	r := bufio.NewReaderSize(in, 1<<20)
	var readErr error
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var d delivery
			if err := json.Unmarshal(line, &d); err != nil {
				readErr = fmt.Errorf("decode delivery: %w", err)
				break
			}
			deliveries <- d
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	close(deliveries)
	wg.Wait()
	return readErr
}
