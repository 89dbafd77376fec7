// Package pglocal starts and stops a private PostgreSQL cluster from the
// PostgreSQL server binaries installed on the machine.
//
// It exists for tests and local development: Start initialises a cluster in
// a directory the first time (initdb, trust authentication, superuser
// "postgres", listening on 127.0.0.1 only) and starts it with pg_ctl; later
// calls, from this or any other process, reuse the running server. Start
// serialises itself with a file lock inside the directory, so concurrent
// callers end up sharing one cluster.
//
// The directory layout is:
//
//	Dir/data/          the cluster (PGDATA)
//	Dir/postgres.log   the server log
//	Dir/.s.PGSQL.NNNN  the Unix socket
//	Dir/pglocal.lock   the lock Start and Stop take
//
// PostgreSQL refuses to run as root. When the calling process is root, the
// binaries run as the unprivileged user "postgres" (or "nobody" if there is
// no such user) and Dir is handed over to that user, so every directory
// above Dir must be searchable by it.
package pglocal
