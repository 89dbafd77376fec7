package esdbtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file holds the PersistentSubscriptions gRPC service: settings,
// Create, Update, Delete, Read and GetInfo.

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

// groupStream is the stream of a group's request options: id's name, or
// $all when there is none.
func groupStream(id *shared.StreamIdentifier) string {
	if id == nil {
		return "$all"
	}
	return string(id.GetStreamName())
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
	stream := groupStream(o.GetStreamIdentifier())
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
	g.addConsumer(c)
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
			for _, d := range q {
				w, err := persistentEventWire(d.ev, d.retry, c.structured)
				if err != nil {
					return err
				}
				if err := srv.SendMsg(w); err != nil {
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
	stream := groupStream(o.GetStreamIdentifier())
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
