package cli

// root builds the command tree.
func (a *app) root() *command {
	migrate := (&migrateCmd{a}).command()
	migrate.sub = []*command{(&migrateStatusCmd{a}).command()}
	cmds := []*command{
		migrate,
		(&runCmd{a}).command(),
		(&serveCmd{a}).command(),
		(&statusCmd{a}).command(),
		{name: "parked", summary: "inspect and unblock aggregates waiting for missing versions",
			help: `Parked events are future versions stored until the versions before them
arrive. These commands list them, fetch the missing versions from the source,
or declare versions that will never arrive.`,
			sub: []*command{
				(&parkedListCmd{a}).command(),
				(&parkedShowCmd{a}).command(),
				(&parkedRepairCmd{a}).command(),
				(&declareGapCmd{a}).command(),
			}},
		{name: "quarantine", summary: "inspect, retry or skip events whose handler failed for good",
			help: `A quarantined event is one whose projection handler kept failing. It blocks
its aggregate (later versions park behind it) and nothing else. Fix the cause,
then retry it; or skip it, on purpose, with a reason.`,
			sub: []*command{
				(&quarantineListCmd{a}).command(),
				(&quarantineActionCmd{a: a}).command(),
				(&quarantineActionCmd{a: a, skip: true}).command(),
			}},
		{name: "conflicts", summary: "list deliveries that reuse a version with another id or payload",
			help: `A conflict is a delivery that claims an (aggregate, version) already held by
a different event. It is recorded, never applied.`,
			sub: []*command{(&conflictsListCmd{a}).command()}},
		{name: "rejected", summary: "list or replay deliveries that failed validation",
			help: `A rejected delivery had an invalid envelope. It was acknowledged to the source,
recorded with its reason, and applied nowhere.`,
			sub: []*command{(&rejectedListCmd{a}).command(), (&rejectedReplayCmd{a}).command()}},
		(&rebuildCmd{a}).command(),
	}
	if a.cfg.Demo != nil {
		cmds = append(cmds, (&demoCmd{a}).command())
	}
	return &command{name: a.name, sub: cmds,
		help: `inorder turns an at-least-once, any-order event stream into exactly-once,
in-order effects on PostgreSQL read models.

Every flag can also be set by the environment variable shown in its help
(DATABASE_URL, ESDB_URL, INORDER_SCHEMA, INORDER_HTTP_ADDR, ...); a flag on
the command line wins.`}
}
