DROP TABLE checkpoints, operator_log, rejected, conflicts, quarantine, parked, applied, versions;
