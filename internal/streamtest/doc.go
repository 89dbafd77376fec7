// Package streamtest holds a projection.Stream over a slice of events, for
// the tests that rebuild a projection side by side from a stream they hold
// in memory, and the deliveries of an at-least-once, any-order source made
// from a stream (WithCopies, Batches), or of one event at once (AtOnce).
package streamtest
