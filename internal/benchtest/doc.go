// Package benchtest holds what the sources' end-to-end benchmarks share:
// the processor-alone baseline they measure a source against (Partition,
// ProcessAll, Baseline), the rounds that run each variant on each workload
// shape (Variant, Rounds) and the figures they report (Rates: events/s per
// variant and round, their median, the median of per-round ratios, Report);
// and what the load tests measure calls with (Latencies, Quantile).
package benchtest
