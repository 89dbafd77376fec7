// Package ledgertest gives a test the ledger projection (examples/ledger)
// on a migrated schema of its own, with a processor set up on it, and the
// check the sources' tests end with: the read model is the in-order fold of
// the events delivered (Bundle.RequireFold), whatever their order and
// copies.
package ledgertest
