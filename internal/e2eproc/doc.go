// Package e2eproc holds what the end-to-end commands (internal/esdbe2e,
// kafkae2e, natse2e, pgtablee2e) share: their child processes (start one,
// stop it gracefully and read its peak RSS, find a free port, read a figure
// off a worker's /metrics, a Group of 'inorder run' processes), the run's
// schema, the workload and the check of the read model against its fold,
// and, for the brokers' commands, the whole orchestration (Broker).
//
// Its files: flags.go has the flags every command takes; e2eproc.go the
// child processes and what is read off them; broker.go, above both, the
// brokers' orchestration, the run's schema and the group of workers.
package e2eproc
