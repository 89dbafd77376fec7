package esdbtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// ServerVersion is the EventStoreDB version ServerFeatures reports by
// default (see [Options].Version).
const ServerVersion = "23.10.0"

// Options configures a [Server]. A nil *Options and the zero value are valid.
type Options struct {
	// Addr is the listen address. Default "127.0.0.1:0" (a free port).
	Addr string
	// Logger receives debug logs of RPCs and errors. Default: discard.
	Logger *slog.Logger
	// MessageTimeout is the persistent subscription message timeout used
	// when the create request gives none (0). Default 30s.
	MessageTimeout time.Duration
	// CheckpointAtEnd emulates a server bug (KurrentDB 25.0.0 and some
	// 24.10 releases, kurrent-io/KurrentDB#4970, fixed by #4975): when a
	// filtered $all subscription catches up, its checkpoint carries the
	// end of the log — the position the next event will be written at —
	// instead of the last event's. A client that resumes from it
	// (exclusive) misses that next event. Default false.
	CheckpointAtEnd bool
	// Version is the server version ServerFeatures reports, as
	// "major.minor.patch". Clients choose features by it (a source picks
	// its persistent groups' consumer strategy by it, say); the server
	// behaves the same whatever it says. Default [ServerVersion].
	Version string
}

// Server is an in-memory, in-process EventStoreDB speaking the gRPC protocol
// of the v4 Go client. All methods are safe for concurrent use.
type Server struct {
	opts   Options
	logger *slog.Logger
	addr   string

	lmu       sync.Mutex // lifecycle: gs, serveDone, closed
	gs        *grpc.Server
	serveDone chan struct{}
	closed    bool

	unavailable atomic.Bool

	faultMu sync.Mutex
	faults  map[string]error // SetError: method suffix -> error

	mu       sync.Mutex // everything below
	log      []*record  // the transaction log ($all), append-only
	streams  map[string]*streamState
	nextPos  uint64
	notify   chan struct{} // closed and replaced on every write
	dropCh   chan struct{} // closed and replaced by DropSubscriptions
	groups   map[string]*psGroup
	stopping bool // Stop is draining handlers: consumers leave silently
	shut     bool // Close called: timers must not act

	tickStop chan struct{}
	tickDone chan struct{}
}

// Start listens on opts.Addr and serves until [Server.Close].
func Start(opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MessageTimeout <= 0 {
		o.MessageTimeout = 30 * time.Second
	}
	if o.Version == "" {
		o.Version = ServerVersion
	}
	s := &Server{
		opts:     o,
		logger:   o.Logger,
		streams:  map[string]*streamState{},
		nextPos:  firstPosition,
		notify:   make(chan struct{}),
		dropCh:   make(chan struct{}),
		groups:   map[string]*psGroup{},
		tickStop: make(chan struct{}),
		tickDone: make(chan struct{}),
	}
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("esdbtest: listen %s: %w", o.Addr, err)
	}
	s.addr = lis.Addr().String()
	s.serve(lis)
	go s.ticker()
	return s, nil
}

// New starts a server with default options and closes it when the test
// ends. It fails the test if the server cannot start.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start(nil)
	if err != nil {
		t.Fatalf("esdbtest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Addr returns the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// URL returns a connection string for esdb.ParseConnectionString.
func (s *Server) URL() string { return "esdb://" + s.addr + "?tls=false" }

func (s *Server) serve(lis net.Listener) {
	gs := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.UnknownServiceHandler(s.unknownHandler),
		grpc.WaitForHandlers(true),
		grpc.ForceServerCodecV2(newWireCodec()), // events go out pre-encoded (wire.go)
	)
	streams.RegisterStreamsServer(gs, &streamsService{s: s})
	persistent.RegisterPersistentSubscriptionsServer(gs, &persistentService{s: s})
	serverfeatures.RegisterServerFeaturesServer(gs, &featuresService{version: s.opts.Version})
	done := make(chan struct{})
	s.gs, s.serveDone = gs, done
	go func() {
		defer close(done)
		if err := gs.Serve(lis); err != nil {
			s.logger.Debug("esdbtest: serve ended", "err", err)
		}
	}()
}

// Stop stops serving: the listener and all connections are closed and every
// open RPC ends. Data is kept. Persistent subscription groups behave like
// after a node restart: in-flight and retry state is dropped and each group
// resumes from its last checkpoint (see the package documentation).
func (s *Server) Stop() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.gs == nil {
		return
	}
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.gs.Stop() // WaitForHandlers: returns once every handler has returned
	<-s.serveDone
	s.gs, s.serveDone = nil, nil
	s.mu.Lock()
	s.stopping = false
	for _, g := range s.groups {
		g.reload(s)
	}
	s.mu.Unlock()
}

// Restart listens again on the same address with the same data. It fails
// if the server is running or closed, or if the address cannot be bound.
func (s *Server) Restart() error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closed {
		return errors.New("esdbtest: server is closed")
	}
	if s.gs != nil {
		return errors.New("esdbtest: server is running")
	}
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("esdbtest: listen %s: %w", s.addr, err)
	}
	s.serve(lis)
	return nil
}

// Close stops the server for good. It is idempotent.
func (s *Server) Close() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.stopLocked()
	close(s.tickStop)
	<-s.tickDone
	s.mu.Lock()
	s.shut = true
	for _, g := range s.groups {
		g.stopTimers()
	}
	s.mu.Unlock()
}

// DropSubscriptions aborts every open subscription (catch-up and
// persistent) with codes.Unavailable. A subscription whose sender is
// blocked by gRPC flow control (client not reading) ends once it unblocks.
func (s *Server) DropSubscriptions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.dropCh)
	s.dropCh = make(chan struct{})
}

// SetUnavailable makes every RPC (server features included) fail with
// codes.Unavailable while on. Turning it on also drops open subscriptions.
func (s *Server) SetUnavailable(on bool) {
	s.unavailable.Store(on)
	if on {
		s.DropSubscriptions()
	}
}

// SetError makes every call of the RPCs whose full gRPC method name ends
// with method (such as "PersistentSubscriptions/Read" or
// "Streams/Read") fail with err, a gRPC status error (status.Error), until
// it is called again with a nil err. It injects what a real node answers
// for good — PermissionDenied, InvalidArgument, NotFound — or for a while.
// Subscriptions open already are not dropped.
func (s *Server) SetError(method string, err error) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.faults == nil {
		s.faults = map[string]error{}
	}
	if err == nil {
		delete(s.faults, method)
		return
	}
	s.faults[method] = err
}

// fault returns the injected error of a full method name, if any.
func (s *Server) fault(fullMethod string) error {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	for m, err := range s.faults {
		if strings.HasSuffix(fullMethod, m) {
			return err
		}
	}
	return nil
}

// Append writes events to a stream (expected revision "any") without gRPC
// and returns the revision of the last one. Appending to a soft-deleted
// stream recreates it; appending to a tombstoned one fails.
func (s *Server) Append(stream string, events ...Event) (lastRevision uint64, err error) {
	if stream == "" || stream == "$all" {
		return 0, fmt.Errorf("esdbtest: invalid stream name %q", stream)
	}
	if len(events) == 0 {
		return 0, errors.New("esdbtest: no events")
	}
	ps := make([]proposed, len(events))
	for i, ev := range events {
		if ev.Type == "" {
			return 0, fmt.Errorf("esdbtest: event %d has no type", i)
		}
		id := ev.ID
		if id == uuid.Nil {
			id = uuid.New()
		}
		ct := ev.ContentType
		if ct == "" {
			ct = contentTypeJSON
		}
		ps[i] = proposed{id: id, eventType: ev.Type, contentType: ct, data: ev.Data, meta: ev.Metadata}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := s.appendLocked(stream, expectation{kind: expectAny}, ps)
	if err != nil {
		return 0, fmt.Errorf("esdbtest: %w", err)
	}
	s.pumpAllLocked()
	return uint64(out.current), nil
}

// Truncate makes events with revision < before unreadable through stream
// reads and subscriptions, like setting $tb in the stream metadata (a
// $metadata event is written to "$$"+stream). $all still contains them.
func (s *Server) Truncate(stream string, before uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[stream]; st != nil && st.tombstoned {
		return
	}
	s.setTruncateBeforeLocked(stream, before)
	s.pumpAllLocked()
}

// DeleteStream soft-deletes a stream: reads answer stream-not-found until
// it is appended to again (revisions then continue). $all keeps the events.
func (s *Server) DeleteStream(stream string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[stream]; st != nil && st.tombstoned {
		return
	}
	s.setTruncateBeforeLocked(stream, deletedStreamRevision)
	s.pumpAllLocked()
}

// errSubscriptionDropped ends subscriptions on DropSubscriptions.
var errSubscriptionDropped = status.Error(codes.Unavailable, "esdbtest: subscription dropped")

func (s *Server) unavailableErr() error {
	return status.Error(codes.Unavailable, "esdbtest: server unavailable")
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.unavailable.Load() {
		return nil, s.unavailableErr()
	}
	if err := s.fault(info.FullMethod); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	if err != nil {
		s.logger.Debug("esdbtest: rpc failed", "method", info.FullMethod, "err", err)
	}
	return resp, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	var err error
	switch {
	case s.unavailable.Load():
		err = s.unavailableErr()
	case s.fault(info.FullMethod) != nil:
		err = s.fault(info.FullMethod)
	default:
		err = handler(srv, ss)
	}
	if err != nil {
		s.logger.Debug("esdbtest: rpc ended", "method", info.FullMethod, "err", err)
		if info.IsClientStream && !info.IsServerStream {
			// Append: the v4.2.0 client reports a status that arrives
			// while it is still sending as an "EOF" of code Unknown.
			// Reading its messages first makes it see the real status.
			drain(ss)
		}
	}
	return err
}

// drain reads and discards the rest of a client stream.
func drain(ss grpc.ServerStream) {
	for ss.RecvMsg(&shared.Empty{}) == nil {
	}
}

func (s *Server) unknownHandler(_ any, stream grpc.ServerStream) error {
	if s.unavailable.Load() {
		return s.unavailableErr()
	}
	method, _ := grpc.MethodFromServerStream(stream)
	s.logger.Debug("esdbtest: unimplemented method", "method", method)
	return status.Errorf(codes.Unimplemented, "esdbtest: method %s is not implemented", method)
}

// ticker drives time based persistent subscription checkpoints.
func (s *Server) ticker() {
	defer close(s.tickDone)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.tickStop:
			return
		case now := <-t.C:
			s.mu.Lock()
			for _, g := range s.groups {
				g.maybeCheckpoint(s, now, true)
			}
			s.mu.Unlock()
		}
	}
}

type featuresService struct {
	serverfeatures.UnimplementedServerFeaturesServer
	version string
}

func (f *featuresService) GetSupportedMethods(context.Context, *shared.Empty) (*serverfeatures.SupportedMethods, error) {
	const (
		streamsSvc    = "event_store.client.streams.streams"
		persistentSvc = "event_store.client.persistent_subscriptions.persistentsubscriptions"
		featuresSvc   = "event_store.client.server_features.serverfeatures"
	)
	m := func(svc, name string, features ...string) *serverfeatures.SupportedMethod {
		return &serverfeatures.SupportedMethod{ServiceName: svc, MethodName: name, Features: features}
	}
	return &serverfeatures.SupportedMethods{
		EventStoreServerVersion: f.version,
		Methods: []*serverfeatures.SupportedMethod{
			m(streamsSvc, "read"),
			m(streamsSvc, "append"),
			m(streamsSvc, "delete"),
			m(streamsSvc, "tombstone"),
			m(persistentSvc, "create", "stream", "all"),
			m(persistentSvc, "update", "stream", "all"),
			m(persistentSvc, "delete", "stream", "all"),
			m(persistentSvc, "read", "stream", "all"),
			m(persistentSvc, "getinfo", "stream", "all"),
			m(featuresSvc, "getsupportedmethods"),
		},
	}, nil
}
