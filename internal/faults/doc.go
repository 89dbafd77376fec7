// Package faults is inorder's fault suite: it has no code of its own, only
// tests (faults_test.go) that run worker processes against a private
// PostgreSQL cluster and break things while they work — workers killed with
// SIGKILL, the server restarted (pg_ctl restart -m immediate and -m fast),
// backends terminated mid-batch, connections cut mid-batch and during COMMIT
// by a proxy (package internal/pgproxy) — and then require the read model
// to equal the in-order fold, every event applied exactly once (an audit
// projection without unique constraints would show a second application),
// nothing parked, quarantined or rejected, and no error returned by
// projection.Processor.Process.
//
// The small size runs with go test ./...; the full size (100,000 events) is
//
//	INORDER_FAULTS=full go test -count=1 -run TestFaults -v -timeout 60m ./internal/faults/
//
// docs/operations.md records its figures.
package faults
