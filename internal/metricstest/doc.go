// Package metricstest is for the tests that pin a collector's /metrics
// output to the byte: RequireGolden compares what a collector collects with
// a text exposition kept in a file, and Processor gives the collector a
// processor of named projections that needs no database (a source's
// metrics read no more of it than the projections' names).
package metricstest
