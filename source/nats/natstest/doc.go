// Package natstest runs NATS servers with JetStream in process, for tests
// and demos: a single node ([Start], [New]) or a cluster ([StartCluster],
// [NewCluster]) on 127.0.0.1, each node on ports of its own that it keeps
// across a [Server.Shutdown] and [Server.Restart], with its JetStream data
// on disk, so that a restarted node comes back with its streams and
// consumers. It runs the real server (github.com/nats-io/nats-server/v2):
// nothing is simulated.
//
// Tests of package source/nats use it to kill a node of a three-node
// cluster holding an R3 stream while inorder consumes, and to restart a
// single node under a running source.
package natstest
