// Package benchtest holds what the sources' end-to-end benchmarks share:
// the processor-alone baseline they measure a source against (Partition,
// ProcessAll) and the figures they report (Rates: events/s per variant and
// round, their median, the median of per-round ratios).
package benchtest
