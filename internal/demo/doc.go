// Package demo is the 'inorder demo' command: inorder end to end on a
// machine with nothing configured. It finds or starts PostgreSQL, recreates
// a demo schema, appends a generated workload to a source it starts in
// process (EventStoreDB's protocol, inorder's events table or NATS
// JetStream), consumes it with competing consumers that see deliveries out
// of order and duplicated, performs the workload's effects against an
// in-process webhook receiver, verifies the read model against the in-order
// fold, prints a summary and serves the HTTP API. cmd/inorder wires it in
// with Ledger; another binary can run its own Workload with Command.
//
// Its files, from the ground up: demo.go has the Workload, the options and
// the run's state; receiver.go the workload's effects and the webhook
// receiver; ledgerdemo.go the ledger's workload; database.go the database
// step and effects.go the effects' start and check; await.go the wait for
// the read model; democonsume.go the EventStoreDB consumers, what the
// three sources' fleets share, and the HTTP API served after the summary;
// demopg.go and demonats.go the events-table and NATS sources; command.go
// the command and its run, which calls the steps in order.
package demo
