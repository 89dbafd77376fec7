package esdb

import (
	"errors"
	"fmt"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrRejected is wrapped by the error Run returns when the server rejects
// the subscription for good — access denied, a persistent subscription group
// that does not exist while Persistent.NoCreate is set, a deleted stream, a
// request the server does not support or finds invalid. Retrying cannot
// help: Run stops (after draining what it received) instead of reconnecting
// forever, and the error says what to fix. Transient failures (the node is
// down or restarting, a dropped connection, a leader election) are retried.
var ErrRejected = errors.New("esdb: rejected by the server")

// rejected returns an error wrapping ErrRejected when err means the server
// rejects what the source asks for good, else nil.
func (s *Source) rejected(err error) error {
	if err == nil {
		return nil
	}
	var what string
	switch {
	case hasCode(err, esdbc.ErrorCodeAccessDenied), hasCode(err, esdbc.ErrorCodeUnauthenticated):
		what = "access denied: check the user in the connection string and its permissions"
	case hasCode(err, esdbc.ErrorCodeUnsupportedFeature):
		what = "the server does not support the request (persistent subscriptions to $all need EventStoreDB 21.10 or later)"
	case hasCode(err, esdbc.ErrorCodeStreamDeleted):
		what = "the stream is deleted for good (tombstoned)"
	case grpcCode(err) == codes.InvalidArgument:
		what = "the server finds the request invalid (check the group, stream and filter)"
	case s.cfg.Persistent != nil && s.cfg.Persistent.NoCreate && hasCode(err, esdbc.ErrorCodeResourceNotFound):
		what = fmt.Sprintf("persistent subscription group %q on %s does not exist, and the source must not create it (Persistent.NoCreate): create it, or let the source do it",
			s.cfg.Persistent.Group, streamOrAll(s.cfg.Persistent.Stream))
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrRejected, what, err)
}

// grpcCode returns the gRPC status code err carries, or codes.Unknown.
func grpcCode(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Unknown
}
