package esdbtest

import (
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// This file holds how events go out on the wire. Records are immutable, so
// each one's RecordedEvent is encoded once and kept; a delivered event is
// that encoding in a thin ReadResp wrapper written with protowire, which
// the server's codec sends as is. Everything else goes through proto.

// wireMsg is a message already in protobuf wire format.
type wireMsg []byte

// wireCodec is the server's codec: it sends a wireMsg as is and delegates
// everything else to gRPC's proto codec.
type wireCodec struct{ proto encoding.CodecV2 }

func newWireCodec() wireCodec {
	return wireCodec{proto: encoding.GetCodecV2(protocodec.Name)}
}

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(wireMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(w)}, nil
	}
	return c.proto.Marshal(v)
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c wireCodec) Name() string { return c.proto.Name() }

// Field numbers of streams.proto and persistent.proto. Both ReadResp carry
// the event as content 1; both ReadEvent messages number their fields alike
// and their RecordedEvent messages are the same.
const (
	fieldReadRespEvent     protowire.Number = 1 // ReadResp.event
	fieldReadEventEvent    protowire.Number = 1 // ReadEvent.event
	fieldReadEventLink     protowire.Number = 2 // ReadEvent.link
	fieldReadEventCommit   protowire.Number = 3 // ReadEvent.commit_position (oneof position)
	fieldReadEventRetryCnt protowire.Number = 5 // persistent ReadEvent.retry_count (oneof count)
)

// recordedWire returns the encoding of r as a RecordedEvent with its id in
// the given form, encoding it on first use. It may run concurrently: two
// callers racing encode the same bytes.
func recordedWire(r *record, structured bool) ([]byte, error) {
	slot := &r.wire[0]
	if structured {
		slot = &r.wire[1]
	}
	if b := slot.Load(); b != nil {
		return *b, nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(streamsRecorded(r, structured))
	if err != nil {
		// What gRPC answers when it cannot marshal a message.
		return nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	slot.Store(&b)
	return b, nil
}

// readEventWire encodes a ReadResp holding ev: a streams.ReadResp, or a
// persistent.ReadResp with the retry count when withRetry is set.
func readEventWire(ev resolved, structured bool, withRetry bool, retry int) (wireMsg, error) {
	var event, link []byte
	var err error
	size := 0
	if ev.event != nil {
		if event, err = recordedWire(ev.event, structured); err != nil {
			return nil, err
		}
		size += protowire.SizeTag(fieldReadEventEvent) + protowire.SizeBytes(len(event))
	}
	if ev.link != nil {
		if link, err = recordedWire(ev.link, structured); err != nil {
			return nil, err
		}
		size += protowire.SizeTag(fieldReadEventLink) + protowire.SizeBytes(len(link))
	}
	pos := ev.original().pos
	size += protowire.SizeTag(fieldReadEventCommit) + protowire.SizeVarint(pos)
	count := uint64(int64(int32(retry))) // int32 is a sign-extended varint
	if withRetry {
		size += protowire.SizeTag(fieldReadEventRetryCnt) + protowire.SizeVarint(count)
	}

	b := make([]byte, 0, protowire.SizeTag(fieldReadRespEvent)+protowire.SizeBytes(size))
	b = protowire.AppendTag(b, fieldReadRespEvent, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	if ev.event != nil {
		b = protowire.AppendTag(b, fieldReadEventEvent, protowire.BytesType)
		b = protowire.AppendBytes(b, event)
	}
	if ev.link != nil {
		b = protowire.AppendTag(b, fieldReadEventLink, protowire.BytesType)
		b = protowire.AppendBytes(b, link)
	}
	b = protowire.AppendTag(b, fieldReadEventCommit, protowire.VarintType)
	b = protowire.AppendVarint(b, pos)
	if withRetry {
		b = protowire.AppendTag(b, fieldReadEventRetryCnt, protowire.VarintType)
		b = protowire.AppendVarint(b, count)
	}
	return b, nil
}

// streamsEventWire encodes ev as a streams.ReadResp.
func streamsEventWire(ev resolved, structured bool) (wireMsg, error) {
	return readEventWire(ev, structured, false, 0)
}

// persistentEventWire encodes ev with its retry count as a
// persistent.ReadResp.
func persistentEventWire(ev resolved, retry int, structured bool) (wireMsg, error) {
	return readEventWire(ev, structured, true, retry)
}

// sendStreamsEvent sends ev on a Streams.Read stream.
func sendStreamsEvent(srv grpc.ServerStreamingServer[streams.ReadResp], ev resolved, structured bool) error {
	w, err := streamsEventWire(ev, structured)
	if err != nil {
		return err
	}
	return srv.SendMsg(w)
}
