// Package proctest runs parts of a test in child processes: the test binary
// re-executes itself as a worker (a "role"), which the test talks to with
// lines on the child's stdin and stdout, and can stop with SIGINT or kill
// with SIGKILL. It is the one child-process harness of the module's tests:
// the multi-process and crash tests of the sources, the conformance suite of
// package source/sourcetest, and anything else that must see a process die.
//
// A test package registers its roles in TestMain:
//
//	func TestMain(m *testing.M) {
//		proctest.Main(m, map[string]proctest.Role{
//			"consume": consume, // func(ctx context.Context, c *proctest.Child) error
//		})
//	}
//
// and a test starts one:
//
//	p := proctest.Start(t, "consume", proctest.Options{Env: map[string]string{"DB": url}})
//	p.Expect(t, "READY")
//	p.Send(t, "GO")
//	p.Kill(t) // SIGKILL; requires that the child died of it
//
// In the child, Main calls the role with a context that is cancelled at the
// first SIGINT or SIGTERM (a graceful stop) and exits with status 0 when the
// role returns nil, 1 (after printing the error on stderr) otherwise. The
// role speaks with Child.Say, which writes "proctest: KIND payload" lines on
// stdout (other output is kept for failure reports, not parsed), and reads
// the test's lines with Child.Await.
package proctest
