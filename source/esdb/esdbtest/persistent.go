package esdbtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	strategyRoundRobin       = "RoundRobin"
	strategyDispatchToSingle = "DispatchToSingle"
	strategyPinned           = "Pinned"
	strategyPinnedByCorr     = "PinnedByCorrelation"

	// pinnedBuckets is how many buckets Pinned hashes streams into, like
	// EventStoreDB.
	pinnedBuckets = 1024
	// pinnedHold bounds the messages a Pinned group reads ahead and holds
	// for consumers that are full (EventStoreDB's buffers bound it too).
	pinnedHold = 10000
)

type psSettings struct {
	resolveLinks   bool
	maxRetry       int
	msgTimeout     time.Duration
	minCP, maxCP   int
	cpAfter        time.Duration
	maxSubscribers int
	strategy       string
}

type startKind int

const (
	startBeginning startKind = iota
	startEnd
	startAt // revision (stream) or commit position ($all), inclusive
)

// psGroup is a persistent subscription group. All fields are guarded by
// Server.mu. Source keys are revisions (stream) or log indexes ($all).
type psGroup struct {
	key       string // "<stream>::<group>", also the subscription id
	stream    string // "$all" for $all
	all       bool
	filter    *filter
	settings  psSettings
	startKind startKind
	startAt   uint64

	cursor      uint64               // next source key to read
	outstanding map[uuid.UUID]*psMsg // read but not finished: in flight or queued for retry
	byKey       map[uint64]bool      // the source keys of outstanding
	lastRead    *uint64              // key of the last source record read (GetInfo's last known event)
	low         uint64               // no key below it is outstanding (lowestUnfinished)
	retry       []*psMsg             // queued for (re)delivery, sorted by key
	held        []*psMsg             // Pinned: read, waiting for their consumer's room, in order
	consumers   []*psConsumer
	rr          int // round robin index

	cp     *uint64 // checkpoint: source key to resume from after a restart
	cpBase uint64  // key of the last checkpoint (or the initial cursor)
	cpTime time.Time

	deleted bool
}

type psMsg struct {
	ev       resolved
	id       uuid.UUID // id of the original event: what clients ack
	key      uint64
	retry    int
	consumer *psConsumer // nil unless in flight
	timer    *time.Timer
	gen      uint64 // delivery generation, guards stale timeouts
}

type psConsumer struct {
	bufSize    int
	inflight   int
	structured bool
	queue      []*persistent.ReadResp
	wake       chan struct{} // cap 1
	kicked     chan struct{} // closed by kick
	kickErr    error
}

func (c *psConsumer) push(r *persistent.ReadResp) {
	c.queue = append(c.queue, r)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *psConsumer) kick(err error) {
	if c.kickErr == nil {
		c.kickErr = err
		close(c.kicked)
	}
}

func (g *psGroup) parkedStream() string { return "$persistentsubscription-" + g.key + "-parked" }

func (g *psGroup) initialCursor(s *Server) uint64 {
	switch g.startKind {
	case startEnd:
		if g.all {
			return uint64(len(s.log))
		}
		if st := s.streams[g.stream]; st != nil {
			return uint64(len(st.events))
		}
		return 0
	case startAt:
		if g.all {
			return uint64(s.idxAtOrAfter(g.startAt))
		}
		return g.startAt
	default:
		return 0
	}
}

// reload resets the group like a node restart does: everything in flight
// or queued is forgotten and reading resumes from the checkpoint (or from
// the start option if no checkpoint was written yet).
func (g *psGroup) reload(s *Server) {
	g.stopTimers()
	g.outstanding = map[uuid.UUID]*psMsg{}
	g.byKey = map[uint64]bool{}
	g.lastRead = nil
	g.retry = nil
	g.held = nil
	g.consumers = nil
	g.rr = 0
	if g.cp != nil {
		g.cursor = *g.cp
	} else {
		g.cursor = g.initialCursor(s)
	}
	g.cpBase = g.cursor
	g.low = g.cursor
	g.cpTime = time.Now()
}

func (g *psGroup) stopTimers() {
	for _, m := range g.outstanding {
		if m.timer != nil {
			m.timer.Stop()
		}
	}
}

// readNext returns the next source record matching the filter.
func (g *psGroup) readNext(s *Server) (*record, uint64, bool) {
	if g.all {
		for g.cursor < uint64(len(s.log)) {
			r, k := s.log[g.cursor], g.cursor
			g.cursor++
			if g.filter.match(r) {
				return r, k, true
			}
		}
		return nil, 0, false
	}
	st := s.streams[g.stream]
	if st == nil || st.tombstoned {
		return nil, 0, false
	}
	g.cursor = max(g.cursor, st.tb)
	if g.cursor < uint64(len(st.events)) {
		k := g.cursor
		g.cursor++
		return st.events[k], k, true
	}
	return nil, 0, false
}

func (g *psGroup) nextMessage(s *Server) *psMsg {
	if len(g.retry) > 0 {
		m := g.retry[0]
		g.retry = g.retry[1:]
		return m
	}
	for {
		r, key, ok := g.readNext(s)
		if !ok {
			return nil
		}
		g.lastRead = &key
		ev := s.resolveIfLocked(r, g.settings.resolveLinks)
		id := ev.original().id
		if _, dup := g.outstanding[id]; dup {
			continue // like EventStoreDB: skip a duplicate event id
		}
		m := &psMsg{ev: ev, id: id, key: key}
		g.outstanding[id] = m
		g.byKey[key] = true
		return m
	}
}

func (g *psGroup) hasCapacity() bool {
	for _, c := range g.consumers {
		if c.inflight < c.bufSize {
			return true
		}
	}
	return false
}

func (g *psGroup) pickConsumer() *psConsumer {
	n := len(g.consumers)
	if g.settings.strategy == strategyDispatchToSingle {
		for _, c := range g.consumers {
			if c.inflight < c.bufSize {
				return c
			}
		}
		return nil
	}
	for i := range n {
		idx := (g.rr + i) % n
		if c := g.consumers[idx]; c.inflight < c.bufSize {
			g.rr = (idx + 1) % n
			return c
		}
	}
	return nil
}

func (g *psGroup) pinned() bool {
	return g.settings.strategy == strategyPinned || g.settings.strategy == strategyPinnedByCorr
}

// pinnedConsumer is the consumer of m's stream (the resolved event's): its
// bucket, among the connected consumers.
func (g *psGroup) pinnedConsumer(m *psMsg) *psConsumer {
	r := m.ev.event
	if r == nil {
		r = m.ev.link
	}
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(r.stream); i++ {
		h ^= uint64(r.stream[i])
		h *= 1099511628211
	}
	return g.consumers[int(h%pinnedBuckets)%len(g.consumers)]
}

// pumpPinned delivers every message to the consumer its stream is pinned
// to, in order; messages whose consumer is full wait for it.
func (g *psGroup) pumpPinned(s *Server) {
	kept := g.held[:0]
	for _, m := range g.held {
		if c := g.pinnedConsumer(m); c.inflight < c.bufSize {
			g.deliver(s, c, m)
		} else {
			kept = append(kept, m)
		}
	}
	clear(g.held[len(kept):])
	g.held = kept
	for g.hasCapacity() && len(g.held) < pinnedHold {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		if c := g.pinnedConsumer(m); c.inflight < c.bufSize {
			g.deliver(s, c, m)
		} else {
			g.held = append(g.held, m)
		}
	}
}

// pump delivers as many messages as consumers have room for.
func (g *psGroup) pump(s *Server) {
	if g.deleted || s.stopping || s.shut {
		return
	}
	if len(g.consumers) > 0 && g.pinned() {
		g.pumpPinned(s)
		return
	}
	for g.hasCapacity() {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		g.deliver(s, g.pickConsumer(), m)
	}
}

func (g *psGroup) deliver(s *Server, c *psConsumer, m *psMsg) {
	m.consumer = c
	c.inflight++
	m.gen++
	gen := m.gen
	m.timer = time.AfterFunc(g.settings.msgTimeout, func() { s.onMessageTimeout(g, m, gen) })
	c.push(persistentEvent(m.ev, m.retry, c.structured))
}

func (s *Server) onMessageTimeout(g *psGroup, m *psMsg, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut || s.stopping || g.deleted || m.consumer == nil || m.gen != gen || g.outstanding[m.id] != m {
		return
	}
	g.retryOrPark(s, m)
	s.pumpAllLocked()
}

func (g *psGroup) detach(m *psMsg) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.consumer != nil {
		m.consumer.inflight--
		m.consumer = nil
	}
}

func (g *psGroup) complete(s *Server, m *psMsg) {
	g.detach(m)
	g.forget(m)
	g.maybeCheckpoint(s, time.Now(), false)
}

// forget removes a finished message from the outstanding ones.
func (g *psGroup) forget(m *psMsg) {
	delete(g.outstanding, m.id)
	delete(g.byKey, m.key)
}

// retryOrPark requeues m with retry count + 1, or parks it when it has
// already been retried MaxRetryCount times (EventStoreDB's rule).
func (g *psGroup) retryOrPark(s *Server, m *psMsg) {
	g.detach(m)
	if m.retry >= g.settings.maxRetry {
		g.park(s, m, fmt.Sprintf("Reached retry count of %d", g.settings.maxRetry))
		return
	}
	m.retry++
	i := sort.Search(len(g.retry), func(i int) bool { return g.retry[i].key > m.key })
	g.retry = append(g.retry, nil)
	copy(g.retry[i+1:], g.retry[i:])
	g.retry[i] = m
}

// park writes a "$>" link to the parked stream, like EventStoreDB.
func (g *psGroup) park(s *Server, m *psMsg, reason string) {
	g.detach(m)
	g.forget(m)
	data := string(m.ev.link.dataOrNil())
	if m.ev.event != nil {
		data = fmt.Sprintf("%d@%s", m.ev.event.revision, m.ev.event.stream)
	}
	meta, _ := json.Marshal(map[string]any{
		"Added":                   time.Now().UTC().Format(time.RFC3339Nano),
		"Reason":                  reason,
		"SubscriptionEventNumber": m.ev.original().revision,
	})
	s.writeLocked(g.parkedStream(), []proposed{{
		id: uuid.New(), eventType: eventTypeLinkTo, contentType: contentTypeBinary, data: []byte(data), meta: meta,
	}})
	g.maybeCheckpoint(s, time.Now(), false)
}

func (r *record) dataOrNil() []byte {
	if r == nil {
		return nil
	}
	return r.data
}

// lowestUnfinished returns the lowest source key read and not finished, or
// the cursor. New messages take keys at the cursor and retries keep theirs,
// so the answer never moves back (until a reload) and advancing g.low over
// finished keys costs O(1) amortized.
func (g *psGroup) lowestUnfinished() uint64 {
	g.low = max(g.low, min(g.cpBase, g.cursor))
	for g.low < g.cursor && !g.byKey[g.low] {
		g.low++
	}
	return g.low
}

// maybeCheckpoint follows EventStoreDB's rule: checkpoint when
// MaxCheckpointCount events are done, or on the clock tick when at least
// MinCheckpointCount are done and CheckpointAfter has elapsed.
func (g *psGroup) maybeCheckpoint(_ *Server, now time.Time, timeCheck bool) {
	if g.deleted {
		return
	}
	low := g.lowestUnfinished()
	if low <= g.cpBase {
		return
	}
	diff := int(low - g.cpBase)
	if now.Sub(g.cpTime) < g.settings.cpAfter && diff < g.settings.maxCP {
		return
	}
	if (diff >= g.settings.minCP && timeCheck) || diff >= g.settings.maxCP {
		cp := low
		g.cp, g.cpBase, g.cpTime = &cp, low, now
	}
}

func (g *psGroup) removeConsumer(s *Server, c *psConsumer) {
	for i, x := range g.consumers {
		if x == c {
			g.consumers = append(g.consumers[:i], g.consumers[i+1:]...)
			break
		}
	}
	if g.rr >= len(g.consumers) {
		g.rr = 0
	}
	if s.stopping || g.deleted {
		return // reload / deletion forgets everything anyway
	}
	var lost []*psMsg
	for _, m := range g.outstanding {
		if m.consumer == c {
			lost = append(lost, m)
		}
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].key < lost[j].key })
	for _, m := range lost {
		g.retryOrPark(s, m)
	}
}

func (g *psGroup) ack(s *Server, ids []*shared.UUID) {
	for _, pid := range ids {
		id, err := protoToUUID(pid)
		if err != nil {
			continue
		}
		if m := g.outstanding[id]; m != nil && m.consumer != nil {
			g.complete(s, m)
		}
	}
}

// nack handles the Nack actions like EventStoreDB: Retry/Unknown retry (or
// park once retries are exhausted), Park parks, Skip and Stop drop the
// message (Stop does not stop anything server side).
func (g *psGroup) nack(s *Server, ids []*shared.UUID, action persistent.ReadReq_Nack_Action, reason string) {
	for _, pid := range ids {
		id, err := protoToUUID(pid)
		if err != nil {
			continue
		}
		m := g.outstanding[id]
		if m == nil || m.consumer == nil {
			continue
		}
		switch action {
		case persistent.ReadReq_Nack_Retry, persistent.ReadReq_Nack_Unknown:
			g.retryOrPark(s, m)
		case persistent.ReadReq_Nack_Park:
			g.park(s, m, "Client explicitly NAK'ed message.\n"+reason)
		default:
			g.complete(s, m)
		}
	}
}

// pumpAllLocked lets every group deliver what it can. s.mu must be held.
func (s *Server) pumpAllLocked() {
	for _, g := range s.groups {
		g.pump(s)
	}
}

type persistentService struct {
	persistent.UnimplementedPersistentSubscriptionsServer
	s *Server
}

// settingsGetter is what CreateReq_Settings and UpdateReq_Settings share.
type settingsGetter interface {
	GetResolveLinks() bool
	GetMaxRetryCount() int32
	GetMinCheckpointCount() int32
	GetMaxCheckpointCount() int32
	GetMaxSubscriberCount() int32
	GetMessageTimeoutMs() int32
	GetMessageTimeoutTicks() int64
	GetCheckpointAfterMs() int32
	GetCheckpointAfterTicks() int64
}

func (s *Server) psSettings(st settingsGetter, strategy string) psSettings {
	ps := psSettings{
		resolveLinks:   st.GetResolveLinks(),
		maxRetry:       int(st.GetMaxRetryCount()),
		minCP:          int(st.GetMinCheckpointCount()),
		maxCP:          int(st.GetMaxCheckpointCount()),
		maxSubscribers: int(st.GetMaxSubscriberCount()),
		strategy:       strategy,
	}
	switch {
	case st.GetMessageTimeoutMs() > 0:
		ps.msgTimeout = time.Duration(st.GetMessageTimeoutMs()) * time.Millisecond
	case st.GetMessageTimeoutTicks() > 0:
		ps.msgTimeout = time.Duration(st.GetMessageTimeoutTicks()) * 100
	default:
		ps.msgTimeout = s.opts.MessageTimeout
	}
	switch {
	case st.GetCheckpointAfterMs() > 0:
		ps.cpAfter = time.Duration(st.GetCheckpointAfterMs()) * time.Millisecond
	case st.GetCheckpointAfterTicks() > 0:
		ps.cpAfter = time.Duration(st.GetCheckpointAfterTicks()) * 100
	default:
		ps.cpAfter = 2 * time.Second
	}
	if ps.maxCP <= 0 {
		ps.maxCP = 1000
	}
	if ps.strategy == "" {
		ps.strategy = strategyRoundRobin
	}
	return ps
}

func (p *persistentService) Create(_ context.Context, req *persistent.CreateReq) (*persistent.CreateResp, error) {
	s := p.s
	o := req.GetOptions()
	if o == nil || o.GetGroupName() == "" {
		return nil, status.Error(codes.InvalidArgument, "group name is required")
	}
	g := &psGroup{outstanding: map[uuid.UUID]*psMsg{}, byKey: map[uint64]bool{}}
	switch so := o.GetStreamOption().(type) {
	case *persistent.CreateReq_Options_Stream:
		name, err := streamName(so.Stream.GetStreamIdentifier())
		if err != nil {
			return nil, err
		}
		g.stream = name
		switch so.Stream.GetRevisionOption().(type) {
		case *persistent.CreateReq_StreamOptions_Revision:
			g.startKind, g.startAt = startAt, so.Stream.GetRevision()
		case *persistent.CreateReq_StreamOptions_End:
			g.startKind = startEnd
		}
	case *persistent.CreateReq_Options_All:
		g.stream, g.all = "$all", true
		switch ao := so.All.GetAllOption().(type) {
		case *persistent.CreateReq_AllOptions_Position:
			g.startKind, g.startAt = startAt, ao.Position.GetCommitPosition()
		case *persistent.CreateReq_AllOptions_End:
			g.startKind = startEnd
		}
		f, err := persistentFilter(so.All.GetFilter())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		g.filter = f
	default: // pre-21.10 clients: deprecated stream_identifier + settings.revision
		name, err := streamName(o.GetStreamIdentifier())
		if err != nil {
			return nil, err
		}
		g.stream = name
		switch rev := o.GetSettings().GetRevision(); rev {
		case 0:
		case math.MaxUint64:
			g.startKind = startEnd
		default:
			g.startKind, g.startAt = startAt, rev
		}
	}
	st := o.GetSettings()
	strategy := st.GetConsumerStrategy()
	if strategy == "" {
		strategy = st.GetNamedConsumerStrategy().String()
	}
	g.settings = s.psSettings(st, strategy)
	g.key = g.stream + "::" + o.GetGroupName()

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.groups[g.key]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Subscription group %s on stream %s exists.", o.GetGroupName(), g.stream)
	}
	g.cursor = g.initialCursor(s)
	g.cpBase, g.cpTime, g.low = g.cursor, time.Now(), g.cursor
	s.groups[g.key] = g
	return &persistent.CreateResp{}, nil
}

func groupNotFound(group, stream string) error {
	return status.Errorf(codes.NotFound, "Subscription group '%s' on stream '%s' does not exist.", group, stream)
}

func (p *persistentService) Update(_ context.Context, req *persistent.UpdateReq) (*persistent.UpdateResp, error) {
	s := p.s
	o := req.GetOptions()
	var stream string
	switch so := o.GetStreamOption().(type) {
	case *persistent.UpdateReq_Options_Stream:
		stream = string(so.Stream.GetStreamIdentifier().GetStreamName())
	case *persistent.UpdateReq_Options_All:
		stream = "$all"
	default:
		stream = string(o.GetStreamIdentifier().GetStreamName())
	}
	st := o.GetSettings()
	strategy := st.GetNamedConsumerStrategy().String()
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[stream+"::"+o.GetGroupName()]
	if g == nil {
		return nil, groupNotFound(o.GetGroupName(), stream)
	}
	g.settings = s.psSettings(st, strategy)
	// Like EventStoreDB, updating drops the connected consumers.
	for _, c := range g.consumers {
		c.kick(status.Error(codes.Aborted, "persistent subscription group was updated"))
	}
	return &persistent.UpdateResp{}, nil
}

func (p *persistentService) Delete(_ context.Context, req *persistent.DeleteReq) (*persistent.DeleteResp, error) {
	s := p.s
	o := req.GetOptions()
	stream := "$all"
	if id := o.GetStreamIdentifier(); id != nil {
		stream = string(id.GetStreamName())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := stream + "::" + o.GetGroupName()
	g := s.groups[key]
	if g == nil {
		return nil, groupNotFound(o.GetGroupName(), stream)
	}
	delete(s.groups, key)
	g.deleted = true
	g.stopTimers()
	for _, c := range g.consumers {
		c.kick(status.Error(codes.Aborted, "persistent subscription group was deleted"))
	}
	return &persistent.DeleteResp{}, nil
}

func (p *persistentService) Read(srv persistent.PersistentSubscriptions_ReadServer) error {
	s := p.s
	ctx := srv.Context()
	req, err := srv.Recv()
	if err != nil {
		return err
	}
	o := req.GetOptions()
	if o == nil {
		return status.Error(codes.InvalidArgument, "first message must be options")
	}
	stream := "$all"
	if o.GetAll() == nil {
		stream = string(o.GetStreamIdentifier().GetStreamName())
	}
	bufSize := int(o.GetBufferSize())
	if bufSize <= 0 {
		bufSize = 10
	}
	c := &psConsumer{
		bufSize:    bufSize,
		structured: o.GetUuidOption().GetString_() == nil,
		wake:       make(chan struct{}, 1),
		kicked:     make(chan struct{}),
	}

	s.mu.Lock()
	g := s.groups[stream+"::"+o.GetGroupName()]
	if g == nil {
		s.mu.Unlock()
		return groupNotFound(o.GetGroupName(), stream)
	}
	if g.settings.maxSubscribers > 0 && len(g.consumers) >= g.settings.maxSubscribers {
		s.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "Maximum subscriptions reached.")
	}
	dropCh := s.dropCh
	// Register before confirming, so a client whose Subscribe call returned
	// is known to be in the dispatch rotation. Only this goroutine sends,
	// so the confirmation still goes out before any queued event.
	g.consumers = append(g.consumers, c)
	s.pumpAllLocked()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		g.removeConsumer(s, c)
		s.pumpAllLocked()
		s.mu.Unlock()
	}()

	if err := srv.Send(&persistent.ReadResp{Content: &persistent.ReadResp_SubscriptionConfirmation_{
		SubscriptionConfirmation: &persistent.ReadResp_SubscriptionConfirmation{SubscriptionId: g.key},
	}}); err != nil {
		return err
	}

	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.mu.Lock()
			switch {
			case req.GetAck() != nil:
				g.ack(s, req.GetAck().GetIds())
			case req.GetNack() != nil:
				n := req.GetNack()
				g.nack(s, n.GetIds(), n.GetAction(), n.GetReason())
			}
			s.pumpAllLocked()
			s.mu.Unlock()
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-dropCh:
			return errSubscriptionDropped
		case <-c.kicked:
			return c.kickErr
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-c.wake:
			s.mu.Lock()
			q := c.queue
			c.queue = nil
			s.mu.Unlock()
			for _, r := range q {
				if err := srv.Send(r); err != nil {
					return err
				}
			}
		}
	}
}

// GetInfo answers the group's statistics like EventStoreDB: positions as
// "C:<commit>/P:<prepare>" for $all and revisions for streams. The last
// known event is the last one the group read from its source; the
// checkpointed one is the last before the group's checkpoint (every event at
// or before it is finished). Events are read on demand, so the read and live
// buffers are always empty: what is read and not finished is in flight
// (outstanding) or waits for a retry.
func (p *persistentService) GetInfo(_ context.Context, req *persistent.GetInfoReq) (*persistent.GetInfoResp, error) {
	s := p.s
	o := req.GetOptions()
	stream := "$all"
	if id := o.GetStreamIdentifier(); id != nil {
		stream = string(id.GetStreamName())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[stream+"::"+o.GetGroupName()]
	if g == nil {
		return nil, groupNotFound(o.GetGroupName(), stream)
	}
	pos := func(key uint64) string {
		if !g.all {
			return strconv.FormatUint(key, 10)
		}
		if key < uint64(len(s.log)) {
			return fmt.Sprintf("C:%d/P:%d", s.log[key].pos, s.log[key].pos)
		}
		return ""
	}
	info := &persistent.SubscriptionInfo{
		EventSource:                   stream,
		GroupName:                     o.GetGroupName(),
		Status:                        "Live",
		ResolveLinkTos:                g.settings.resolveLinks,
		MessageTimeoutMilliseconds:    int32(g.settings.msgTimeout / time.Millisecond),
		MaxRetryCount:                 int32(g.settings.maxRetry),
		CheckPointAfterMilliseconds:   int32(g.settings.cpAfter / time.Millisecond),
		MinCheckPointCount:            int32(g.settings.minCP),
		MaxCheckPointCount:            int32(g.settings.maxCP),
		NamedConsumerStrategy:         g.settings.strategy,
		MaxSubscriberCount:            int32(g.settings.maxSubscribers),
		RetryBufferCount:              int32(len(g.retry)),
		OutstandingMessagesCount:      int32(len(g.outstanding) - len(g.retry)),
		LastKnownEventPosition:        "",
		LastCheckpointedEventPosition: "",
	}
	switch {
	case g.startKind == startEnd && g.all:
		info.StartFrom = "C:-1/P:-1"
	case g.startKind == startEnd:
		info.StartFrom = "-1"
	case g.startKind == startAt && g.all:
		info.StartFrom = fmt.Sprintf("C:%d/P:%d", g.startAt, g.startAt)
	case g.startKind == startAt:
		info.StartFrom = strconv.FormatUint(g.startAt, 10)
	case g.all:
		info.StartFrom = "C:0/P:0"
	default:
		info.StartFrom = "0"
	}
	if g.lastRead != nil {
		info.LastKnownEventPosition = pos(*g.lastRead)
	}
	if g.cp != nil && *g.cp > 0 {
		info.LastCheckpointedEventPosition = pos(*g.cp - 1)
	}
	for i, c := range g.consumers {
		info.TotalInFlightMessages += int32(c.inflight)
		info.Connections = append(info.Connections, &persistent.SubscriptionInfo_ConnectionInfo{
			From: "127.0.0.1", ConnectionName: fmt.Sprintf("consumer-%d", i+1),
			InFlightMessages: int32(c.inflight), AvailableSlots: int32(max(c.bufSize-c.inflight, 0)),
		})
	}
	if st := s.streams[g.parkedStream()]; st != nil {
		info.ParkedMessageCount = int64(len(st.events))
	}
	return &persistent.GetInfoResp{SubscriptionInfo: info}, nil
}
