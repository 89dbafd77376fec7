// Package pgproxy is a TCP proxy between PostgreSQL clients and a server,
// for fault-injection tests.
//
// It forwards bytes unchanged but follows the protocol's message framing in
// both directions, so it knows, for each connection, whether the server has
// it inside a transaction (the status of the last ReadyForQuery) and when
// the client sends a COMMIT. That lets a test cut connections where it
// hurts:
//
//   - [Proxy.Cut] closes connections that are in the middle of a
//     transaction (or every connection), as a network failure or a crashed
//     load balancer would;
//   - [Proxy.CutAtCommit] arms the proxy so that the next COMMITs reach the
//     server, which commits, and the connection is cut before the server's
//     answer reaches the client: the ambiguous commit, where the client
//     cannot know whether its transaction committed.
//
// A cut closes both sides of the connection: the client reads end of file
// (pgx reports "unexpected EOF"), the server's backend reads end of file and
// rolls back whatever it had not committed.
//
// The proxy understands the protocol as pgx speaks it with sslmode=disable
// (an SSLRequest or GSSENCRequest is answered by the server with one byte,
// which the proxy also follows). It is not meant for production traffic.
package pgproxy
