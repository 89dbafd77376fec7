// Package sourceutil holds the parts of a source's Run that every source
// package (esdb, nats, kafka, pgtable) writes the same way: the two
// contexts of a graceful stop (Drain), the dispatcher's goroutine (Work) and
// the loop of sessions with backoff (Sessions.Consume).
//
// It owns no state of its own: each source keeps its figures and its log,
// and passes what differs (the log lines, the session) as functions.
package sourceutil
