package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds how long a node may take to accept connections, and a
// cluster to elect its JetStream meta leader.
const readyTimeout = 60 * time.Second

// Server is one in-process NATS server with JetStream, listening on
// 127.0.0.1 on a port chosen when it first started and kept across
// restarts, with its JetStream data in a directory of its own.
type Server struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server // nil while down
}

// Options configures Start. The zero value is a single node whose data
// lives in a new temporary directory.
type Options struct {
	// Dir holds the node's JetStream data. Default: a new temporary
	// directory, which Shutdown does not remove (New's test cleanup does).
	Dir string
}

// Start starts a single node with JetStream on a free port of 127.0.0.1.
func Start(o Options) (*Server, error) {
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "natstest-")
		if err != nil {
			return nil, fmt.Errorf("natstest: %w", err)
		}
		dir = d
	}
	s := &Server{opts: baseOptions("n1", dir)}
	s.opts.Port = server.RANDOM_PORT
	if err := s.start(); err != nil {
		return nil, err
	}
	// Keep the port it got, so that a restart comes back on it.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	return s, nil
}

// New starts a single node for t and shuts it down (and removes its data)
// when t ends.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func baseOptions(name, dir string) server.Options {
	return server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		JetStream:  true,
		StoreDir:   filepath.Join(dir, name),
		NoLog:      true,
		NoSigs:     true,
		// Small enough for a shared test machine, large enough for every
		// test and the demo.
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  4 << 30,
	}
}

func (s *Server) start() error {
	opts := s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return fmt.Errorf("natstest: node %s not ready within %s", s.opts.ServerName, readyTimeout)
	}
	s.srv = srv
	return nil
}

// URL returns the node's client URL, such as "nats://127.0.0.1:43121".
func (s *Server) URL() string {
	return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port)
}

// Running reports whether the node is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// Shutdown stops the node: every connection to it drops at once. Its data
// stays, for Restart. It does nothing when the node is down.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Restart stops the node if it is up and starts it again on the same port
// with the same data.
func (s *Server) Restart() error {
	s.Shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start()
}

// Cluster is a JetStream cluster of in-process nodes on 127.0.0.1, each
// with its own client and route ports (kept across restarts) and data.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a cluster of n nodes (n ≥ 1) whose data lives under
// dir (a new temporary directory if empty) and waits until it has a
// JetStream meta leader.
func StartCluster(n int, dir string) (*Cluster, error) {
	if n < 1 {
		return nil, errors.New("natstest: a cluster needs a node")
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "natstest-cluster-")
		if err != nil {
			return nil, fmt.Errorf("natstest: %w", err)
		}
		dir = d
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[n+i])})
	}
	c := &Cluster{}
	for i := range n {
		opts := baseOptions(fmt.Sprintf("n%d", i+1), dir)
		opts.Port = ports[i]
		opts.Cluster = server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[n+i]}
		opts.Routes = routes
		c.Nodes = append(c.Nodes, &Server{opts: opts})
	}
	// Start the nodes together: a node whose routes are all down waits
	// for them without failing.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range c.Nodes {
		wg.Go(func() { errs[i] = s.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, err
	}
	if err := c.WaitReady(context.Background()); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// NewCluster starts a cluster of n nodes for t and shuts it down when t
// ends.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := StartCluster(n, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// URL returns the client URLs of every node, comma-separated: what a
// client connects to, failing over from one node to the next.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// WaitReady waits until JetStream answers on every running node (the
// cluster has a meta leader), or ctx is done, or readyTimeout passed.
func (c *Cluster) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		if err := s.waitJetStream(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitJetStream waits until the node answers a JetStream account request.
func (s *Server) waitJetStream(ctx context.Context) error {
	nc, err := natsc.Connect(s.URL(), natsc.MaxReconnects(-1), natsc.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("natstest: connect to %s: %w", s.opts.ServerName, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natstest: JetStream on %s not ready: %w", s.opts.ServerName, err)
		case <-time.After(50 * time.Millisecond): // the meta group elects its leader
		}
	}
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for _, s := range c.Nodes {
		s.Shutdown()
	}
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natstest: free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// Leader returns the index in Nodes of the running node that leads the
// stream of the default account (the one clients without credentials
// use), or -1 when no running node does (an election is under way, or the
// stream does not exist).
func (c *Cluster) Leader(stream string) int {
	for i, s := range c.Nodes {
		if s.isStreamLeader(stream) {
			return i
		}
	}
	return -1
}

func (s *Server) isStreamLeader(stream string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil && s.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream)
}

// Bounce kills node i — every connection to it drops at once — waits
// until another node leads stream (when stream is not empty and node i led
// it: the failover a node's death causes), waits down for the given time,
// restarts the node with its data and waits until JetStream answers on
// every node again. It returns ctx's error if ctx ends first.
func (c *Cluster) Bounce(ctx context.Context, i int, stream string, down time.Duration) error {
	if i < 0 || i >= len(c.Nodes) {
		return fmt.Errorf("natstest: no node %d in a cluster of %d", i, len(c.Nodes))
	}
	s := c.Nodes[i]
	s.Shutdown()
	if stream != "" {
		ectx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		for l := c.Leader(stream); l < 0 || l == i; l = c.Leader(stream) {
			select {
			case <-ectx.Done():
				return fmt.Errorf("natstest: no node took the lead of stream %s from %s: %w", stream, s.opts.ServerName, ectx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	if err := s.Restart(); err != nil {
		return err
	}
	return c.WaitReady(ctx)
}
