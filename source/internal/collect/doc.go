// Package collect builds the Prometheus collectors of the sources: a table
// of series read from one set of figures per scrape ([New], [Series]), and
// the rows every source reports alike — its dispatcher's window, batches
// and waits ([DispatchSeries]) and its lag ([LagSeries]) — with the labels
// and buckets they carry ([CloseReasons], [FillBuckets]).
//
// Package source's NewCollector and the sources with figures of their own
// (source/esdb, source/nats, through package sourceutil) fill the table;
// it knows none of their types, so each hands it a [Dispatch] and a lag.
//
// collect.go holds the table, its collector and the dispatcher's figures
// it reads (the fill histogram among them); rows.go the shared rows.
package collect
