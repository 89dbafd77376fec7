package pgtable

// SequenceOnly makes cfg read by Seq alone, without the snapshot bound: the
// reader that skips a transaction committing late, for the gap test.
func SequenceOnly(cfg *Config) { cfg.sequenceOnly = true }
