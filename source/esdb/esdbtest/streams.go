package esdbtest

import (
	"context"
	"errors"
	"io"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// readBatch bounds how many records are copied per lock acquisition.
const readBatch = 256

type streamsService struct {
	streams.UnimplementedStreamsServer
	s *Server
}

// streamDeleted answers like EventStoreDB for a tombstoned stream: the
// client recognizes the trailers and returns ErrorCodeStreamDeleted.
func streamDeleted(setTrailer func(metadata.MD), name string) error {
	setTrailer(metadata.Pairs("exception", "stream-deleted", "stream-name", name))
	return status.Errorf(codes.FailedPrecondition, "Event stream '%s' is deleted.", name)
}

func trailerSetter(ss grpc.ServerStream) func(metadata.MD) { return ss.SetTrailer }

func unaryTrailerSetter(ctx context.Context) func(metadata.MD) {
	return func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) }
}

func streamName(id *shared.StreamIdentifier) (string, error) {
	name := string(id.GetStreamName())
	if name == "" {
		return "", status.Error(codes.InvalidArgument, "stream name is required")
	}
	return name, nil
}

func (x *streamsService) Read(req *streams.ReadReq, srv streams.Streams_ReadServer) error {
	opts := req.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "options are required")
	}
	if opts.GetSubscription() != nil {
		return x.subscribe(opts, srv)
	}
	structured := opts.GetUuidOption().GetString_() == nil
	f, _, err := readFilter(opts.GetFilter())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	count := opts.GetCount()
	backwards := opts.GetReadDirection() == streams.ReadReq_Options_Backwards
	resolve := opts.GetResolveLinks()

	var out []resolved
	s := x.s
	switch {
	case opts.GetStream() != nil:
		so := opts.GetStream()
		name, err := streamName(so.GetStreamIdentifier())
		if err != nil {
			return err
		}
		s.mu.Lock()
		st := s.streams[name]
		if st != nil && st.tombstoned {
			s.mu.Unlock()
			return streamDeleted(trailerSetter(srv), name)
		}
		if !st.readable() {
			s.mu.Unlock()
			return srv.Send(&streams.ReadResp{Content: &streams.ReadResp_StreamNotFound_{
				StreamNotFound: &streams.ReadResp_StreamNotFound{StreamIdentifier: so.GetStreamIdentifier()},
			}})
		}
		last := int64(len(st.events) - 1)
		var from int64
		switch so.GetRevisionOption().(type) {
		case *streams.ReadReq_Options_StreamOptions_Revision:
			from = int64(min(so.GetRevision(), uint64(last)+1))
		case *streams.ReadReq_Options_StreamOptions_End:
			from = last + 1
			if backwards {
				from = last
			}
		default: // start
			from = 0
		}
		if backwards {
			from = min(from, last)
			for r := from; r >= int64(st.tb) && r >= 0 && uint64(len(out)) < count; r-- {
				out = append(out, s.resolveIfLocked(st.events[r], resolve))
			}
		} else {
			for r := max(from, int64(st.tb)); r <= last && uint64(len(out)) < count; r++ {
				out = append(out, s.resolveIfLocked(st.events[r], resolve))
			}
		}
		s.mu.Unlock()
	case opts.GetAll() != nil:
		ao := opts.GetAll()
		s.mu.Lock()
		if backwards {
			i := len(s.log) - 1 // end
			switch o := ao.GetAllOption().(type) {
			case *streams.ReadReq_Options_AllOptions_Position:
				i = s.idxAtOrAfter(o.Position.GetCommitPosition()) - 1 // exclusive
			case *streams.ReadReq_Options_AllOptions_Start:
				i = -1
			}
			for ; i >= 0 && uint64(len(out)) < count; i-- {
				if r := s.log[i]; f.match(r) {
					out = append(out, resolved{event: r})
				}
			}
		} else {
			i := 0 // start
			switch o := ao.GetAllOption().(type) {
			case *streams.ReadReq_Options_AllOptions_Position:
				i = s.idxAtOrAfter(o.Position.GetCommitPosition()) // inclusive
			case *streams.ReadReq_Options_AllOptions_End:
				i = len(s.log)
			}
			for ; i < len(s.log) && uint64(len(out)) < count; i++ {
				if r := s.log[i]; f.match(r) {
					out = append(out, resolved{event: r})
				}
			}
		}
		s.mu.Unlock()
	default:
		return status.Error(codes.InvalidArgument, "stream option is required")
	}
	for _, ev := range out {
		if err := sendStreamsEvent(srv, ev, structured); err != nil {
			return err
		}
	}
	return nil
}

// subscribe serves a catch-up subscription: confirmation, history,
// (checkpoint,) caught-up, then live events. The start position/revision
// is excluded.
func (x *streamsService) subscribe(opts *streams.ReadReq_Options, srv streams.Streams_ReadServer) error {
	s := x.s
	ctx := srv.Context()
	structured := opts.GetUuidOption().GetString_() == nil
	resolve := opts.GetResolveLinks()
	f, cpInterval, err := readFilter(opts.GetFilter())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}

	var (
		all    bool
		name   string
		next   uint64 // next revision (stream) or log index ($all)
		dropCh chan struct{}
	)
	s.mu.Lock()
	dropCh = s.dropCh
	switch {
	case opts.GetStream() != nil:
		so := opts.GetStream()
		if name, err = streamName(so.GetStreamIdentifier()); err != nil {
			s.mu.Unlock()
			return err
		}
		st := s.streams[name]
		if st != nil && st.tombstoned {
			s.mu.Unlock()
			return streamDeleted(trailerSetter(srv), name)
		}
		switch so.GetRevisionOption().(type) {
		case *streams.ReadReq_Options_StreamOptions_Revision:
			next = so.GetRevision() + 1
		case *streams.ReadReq_Options_StreamOptions_End:
			if st != nil {
				next = uint64(len(st.events))
			}
		}
	case opts.GetAll() != nil:
		all = true
		switch o := opts.GetAll().GetAllOption().(type) {
		case *streams.ReadReq_Options_AllOptions_Position:
			next = uint64(s.idxAfter(o.Position.GetCommitPosition()))
		case *streams.ReadReq_Options_AllOptions_End:
			next = uint64(len(s.log))
		}
	default:
		s.mu.Unlock()
		return status.Error(codes.InvalidArgument, "stream option is required")
	}
	s.mu.Unlock()

	if err := srv.Send(&streams.ReadResp{Content: &streams.ReadResp_Confirmation{
		Confirmation: &streams.ReadResp_SubscriptionConfirmation{SubscriptionId: uuid.NewString()},
	}}); err != nil {
		return err
	}

	var (
		caughtUp    bool
		scanned     int     // events scanned since the last checkpoint
		lastScanned *record // last event scanned by a filtered $all subscription
	)
	checkpointAt := func(pos uint64) error {
		scanned = 0
		return srv.Send(&streams.ReadResp{Content: &streams.ReadResp_Checkpoint_{
			Checkpoint: &streams.ReadResp_Checkpoint{CommitPosition: pos, PreparePosition: pos},
		}})
	}
	checkpoint := func(r *record) error { return checkpointAt(r.pos) }
	for {
		select {
		case <-dropCh:
			return errSubscriptionDropped
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		default:
		}

		var batch []*record
		var out []resolved
		s.mu.Lock()
		if all {
			end := min(uint64(len(s.log)), next+readBatch)
			batch = append(batch, s.log[next:end]...)
			next = end
		} else {
			st := s.streams[name]
			if st != nil && st.tombstoned {
				s.mu.Unlock()
				return streamDeleted(trailerSetter(srv), name)
			}
			if st != nil {
				next = max(next, st.tb)
				for next < uint64(len(st.events)) && len(out) < readBatch {
					out = append(out, s.resolveIfLocked(st.events[next], resolve))
					next++
				}
			}
		}
		wait := s.notify
		s.mu.Unlock()

		for _, r := range batch { // $all
			if f.match(r) {
				if err := sendStreamsEvent(srv, resolved{event: r}, structured); err != nil {
					return err
				}
			}
			if f != nil {
				lastScanned = r
				scanned++
				if scanned >= cpInterval {
					if err := checkpoint(r); err != nil {
						return err
					}
				}
			}
		}
		for _, ev := range out { // stream
			if err := sendStreamsEvent(srv, ev, structured); err != nil {
				return err
			}
		}
		if len(batch) > 0 || len(out) > 0 {
			continue
		}
		if !caughtUp {
			caughtUp = true
			if f != nil && s.opts.CheckpointAtEnd {
				s.mu.Lock()
				end := s.nextPos
				s.mu.Unlock()
				if err := checkpointAt(end); err != nil {
					return err
				}
			} else if f != nil && scanned > 0 {
				if err := checkpoint(lastScanned); err != nil {
					return err
				}
			}
			if err := srv.Send(&streams.ReadResp{Content: &streams.ReadResp_CaughtUp_{
				CaughtUp: &streams.ReadResp_CaughtUp{},
			}}); err != nil {
				return err
			}
		}
		select {
		case <-wait:
		case <-dropCh:
			return errSubscriptionDropped
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

func expectationOf(any, noStream, exists bool, revision *uint64) expectation {
	switch {
	case revision != nil:
		return expectation{kind: expectRevision, revision: *revision}
	case noStream:
		return expectation{kind: expectNoStream}
	case exists:
		return expectation{kind: expectStreamExists}
	default:
		return expectation{kind: expectAny}
	}
}

func (x *streamsService) Append(srv streams.Streams_AppendServer) error {
	req, err := srv.Recv()
	if err != nil {
		return err
	}
	opts := req.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "first append message must be options")
	}
	name, err := streamName(opts.GetStreamIdentifier())
	if err != nil {
		return err
	}
	if name == "$all" {
		return status.Error(codes.InvalidArgument, "cannot append to $all")
	}
	var rev *uint64
	if r, ok := opts.GetExpectedStreamRevision().(*streams.AppendReq_Options_Revision); ok {
		rev = &r.Revision
	}
	exp := expectationOf(opts.GetAny() != nil, opts.GetNoStream() != nil, opts.GetStreamExists() != nil, rev)

	var events []proposed
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		pm := req.GetProposedMessage()
		if pm == nil {
			return status.Error(codes.InvalidArgument, "expected a proposed message")
		}
		id, err := protoToUUID(pm.GetId())
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "invalid event id: %v", err)
		}
		typ := pm.GetMetadata()["type"]
		if typ == "" {
			return status.Error(codes.InvalidArgument, "event type is required")
		}
		events = append(events, proposed{
			id:          id,
			eventType:   typ,
			contentType: pm.GetMetadata()["content-type"],
			data:        pm.GetData(),
			meta:        pm.GetCustomMetadata(),
		})
	}

	s := x.s
	s.mu.Lock()
	out, err := s.appendLocked(name, exp, events)
	s.pumpAllLocked()
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, errStreamDeleted) {
			return streamDeleted(trailerSetter(srv), name)
		}
		return status.Error(codes.Internal, err.Error())
	}
	if out.wrong {
		return srv.SendAndClose(wrongExpectedVersion(exp, out.current))
	}
	success := &streams.AppendResp_Success{}
	if out.current < 0 {
		success.CurrentRevisionOption = &streams.AppendResp_Success_NoStream{NoStream: &shared.Empty{}}
	} else {
		success.CurrentRevisionOption = &streams.AppendResp_Success_CurrentRevision{CurrentRevision: uint64(out.current)}
	}
	if out.last != nil {
		success.PositionOption = &streams.AppendResp_Success_Position{Position: &streams.AppendResp_Position{
			CommitPosition: out.last.pos, PreparePosition: out.last.pos,
		}}
	} else {
		success.PositionOption = &streams.AppendResp_Success_NoPosition{NoPosition: &shared.Empty{}}
	}
	return srv.SendAndClose(&streams.AppendResp{Result: &streams.AppendResp_Success_{Success: success}})
}

// wrongExpectedVersion fills both the current and the 20.6.0 fields, like
// EventStoreDB does.
func wrongExpectedVersion(exp expectation, current int64) *streams.AppendResp {
	w := &streams.AppendResp_WrongExpectedVersion{}
	empty := &shared.Empty{}
	if current < 0 {
		w.CurrentRevisionOption = &streams.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: empty}
		w.CurrentRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_NoStream_20_6_0{NoStream_20_6_0: empty}
	} else {
		w.CurrentRevisionOption = &streams.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(current)}
		w.CurrentRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_CurrentRevision_20_6_0{CurrentRevision_20_6_0: uint64(current)}
	}
	switch exp.kind {
	case expectAny:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedAny{ExpectedAny: empty}
		w.ExpectedRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_Any_20_6_0{Any_20_6_0: empty}
	case expectNoStream:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: empty}
	case expectStreamExists:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: empty}
		w.ExpectedRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_StreamExists_20_6_0{StreamExists_20_6_0: empty}
	case expectRevision:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedRevision{ExpectedRevision: exp.revision}
		w.ExpectedRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_ExpectedRevision_20_6_0{ExpectedRevision_20_6_0: exp.revision}
	}
	return &streams.AppendResp{Result: &streams.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: w}}
}

// checkExpected validates an expectation for delete/tombstone; it returns a
// FailedPrecondition error like EventStoreDB on mismatch.
func checkExpected(ctx context.Context, st *streamState, exp expectation) error {
	cur := st.current()
	soft := st != nil && st.deleted
	ok := true
	switch exp.kind {
	case expectNoStream:
		ok = cur == -1 || soft
	case expectStreamExists:
		ok = cur >= 0 && !soft
	case expectRevision:
		ok = cur == int64(exp.revision)
	}
	if ok {
		return nil
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs("exception", "wrong-expected-version"))
	return status.Errorf(codes.FailedPrecondition, "wrong expected version: current %d", cur)
}

func (x *streamsService) Delete(ctx context.Context, req *streams.DeleteReq) (*streams.DeleteResp, error) {
	o := req.GetOptions()
	var rev *uint64
	if r, ok := o.GetExpectedStreamRevision().(*streams.DeleteReq_Options_Revision); ok {
		rev = &r.Revision
	}
	r, err := x.remove(ctx, o, rev, func(name string) *record { return x.s.setTruncateBeforeLocked(name, deletedStreamRevision) })
	if err != nil {
		return nil, err
	}
	return &streams.DeleteResp{PositionOption: &streams.DeleteResp_Position_{Position: &streams.DeleteResp_Position{
		CommitPosition: r.pos, PreparePosition: r.pos,
	}}}, nil
}

func (x *streamsService) Tombstone(ctx context.Context, req *streams.TombstoneReq) (*streams.TombstoneResp, error) {
	o := req.GetOptions()
	var rev *uint64
	if r, ok := o.GetExpectedStreamRevision().(*streams.TombstoneReq_Options_Revision); ok {
		rev = &r.Revision
	}
	r, err := x.remove(ctx, o, rev, x.s.writeTombstoneLocked)
	if err != nil {
		return nil, err
	}
	// The client dereferences the position without a nil check: always set it.
	return &streams.TombstoneResp{PositionOption: &streams.TombstoneResp_Position_{Position: &streams.TombstoneResp_Position{
		CommitPosition: r.pos, PreparePosition: r.pos,
	}}}, nil
}

// removeOptions are what Delete's and Tombstone's options share.
type removeOptions interface {
	GetStreamIdentifier() *shared.StreamIdentifier
	GetAny() *shared.Empty
	GetNoStream() *shared.Empty
	GetStreamExists() *shared.Empty
}

// remove runs a Delete or a Tombstone: it checks the stream and the
// expected revision (rev, if one), then, under the lock, calls apply with
// the stream's name and wakes the subscriptions; it returns apply's record.
func (x *streamsService) remove(ctx context.Context, o removeOptions, rev *uint64, apply func(name string) *record) (*record, error) {
	name, err := streamName(o.GetStreamIdentifier())
	if err != nil {
		return nil, err
	}
	exp := expectationOf(o.GetAny() != nil, o.GetNoStream() != nil, o.GetStreamExists() != nil, rev)
	s := x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[name]
	if st != nil && st.tombstoned {
		return nil, streamDeleted(unaryTrailerSetter(ctx), name)
	}
	if err := checkExpected(ctx, st, exp); err != nil {
		return nil, err
	}
	r := apply(name)
	s.pumpAllLocked()
	return r, nil
}
