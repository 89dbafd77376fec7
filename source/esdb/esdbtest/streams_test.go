package esdbtest_test

import (
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/inorder/inorder/source/esdb/esdbtest"
	"github.com/stretchr/testify/require"
)

func TestServerFeatures(t *testing.T) {
	t.Parallel()
	_, c := serverClient(t)
	v, err := c.GetServerVersion()
	require.NoError(t, err)
	require.Equal(t, esdb.ServerVersion{Major: 23, Minor: 10, Patch: 0}, *v)
}

func TestAppendExpectedRevision(t *testing.T) {
	t.Parallel()
	_, c := serverClient(t)
	ctx := ctxT(t)

	wr, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}},
		jsonEvent("A", `{}`), jsonEvent("B", `{}`))
	require.NoError(t, err)
	require.EqualValues(t, 1, wr.NextExpectedVersion)
	require.NotZero(t, wr.CommitPosition)
	require.Equal(t, wr.CommitPosition, wr.PreparePosition)

	_, err = c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, jsonEvent("C", `{}`))
	require.Equal(t, esdb.ErrorCodeWrongExpectedVersion, esdbCode(t, err))
	require.Contains(t, err.Error(), "expecting 'no_stream' but got '1'")

	_, err = c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(0)}, jsonEvent("C", `{}`))
	require.Equal(t, esdb.ErrorCodeWrongExpectedVersion, esdbCode(t, err))
	require.Contains(t, err.Error(), "expecting '0' but got '1'")

	_, err = c.AppendToStream(ctx, "order-2", esdb.AppendToStreamOptions{ExpectedRevision: esdb.StreamExists{}}, jsonEvent("C", `{}`))
	require.Equal(t, esdb.ErrorCodeWrongExpectedVersion, esdbCode(t, err))
	require.Contains(t, err.Error(), "expecting 'stream_exists' but got 'no_stream'")

	_, err = c.AppendToStream(ctx, "order-2", esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(3)}, jsonEvent("C", `{}`))
	require.Contains(t, err.Error(), "expecting '3' but got 'no_stream'")

	wr2, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(1)}, jsonEvent("C", `{}`))
	require.NoError(t, err)
	require.EqualValues(t, 2, wr2.NextExpectedVersion)
	require.Greater(t, wr2.CommitPosition, wr.CommitPosition)

	wr3, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.StreamExists{}}, jsonEvent("D", `{}`))
	require.NoError(t, err)
	require.EqualValues(t, 3, wr3.NextExpectedVersion)
	wr4, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("E", `{}`))
	require.NoError(t, err)
	require.EqualValues(t, 4, wr4.NextExpectedVersion)

	// Idempotency: the same ids at the same expected revision succeed once.
	id := uuid.New()
	ev := esdb.EventData{EventID: id, EventType: "F", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`)}
	r1, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(4)}, ev)
	require.NoError(t, err)
	r2, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(4)}, ev)
	require.NoError(t, err)
	require.Equal(t, r1, r2)
	evs, err := readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1, 2, 3, 4, 5}, revisions(evs))
	require.Equal(t, id, evs[5].Event.EventID)
}

func TestReadStream(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)

	id := uuid.New()
	last, err := s.Append("order-1",
		esdbtest.Event{ID: id, Type: "Placed", Data: []byte(`{"n":0}`), Metadata: []byte(`{"m":1}`)},
		esdbtest.Event{Type: "Paid", ContentType: "application/octet-stream", Data: []byte{1, 2}},
	)
	require.NoError(t, err)
	require.EqualValues(t, 1, last)
	seed(t, s, "order-1", 3) // revisions 2..4

	evs, err := readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1, 2, 3, 4}, revisions(evs))
	e0 := evs[0].Event
	require.Equal(t, id, e0.EventID)
	require.Equal(t, "Placed", e0.EventType)
	require.Equal(t, "application/json", e0.ContentType)
	require.Equal(t, "order-1", e0.StreamID)
	require.Equal(t, `{"n":0}`, string(e0.Data))
	require.Equal(t, `{"m":1}`, string(e0.UserMetadata))
	require.False(t, e0.CreatedDate.IsZero())
	require.NotZero(t, e0.Position.Commit)
	require.Equal(t, "application/octet-stream", evs[1].Event.ContentType)
	require.Greater(t, evs[1].Event.Position.Commit, e0.Position.Commit)

	// From a revision (inclusive), with a count.
	evs, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{From: esdb.Revision(2)}, 2)
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 3}, revisions(evs))

	// Backwards from the end and from a revision.
	evs, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 2)
	require.NoError(t, err)
	require.Equal(t, []uint64{4, 3}, revisions(evs))
	evs, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.Revision(1)}, 10)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 0}, revisions(evs))

	// Not found.
	_, err = readStream(t, c, "nope", esdb.ReadStreamOptions{}, 10)
	require.Equal(t, esdb.ErrorCodeResourceNotFound, esdbCode(t, err))

	// Truncate: revisions < 3 are gone.
	s.Truncate("order-1", 3)
	evs, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4}, revisions(evs))
	evs, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{4, 3}, revisions(evs))

	// Soft delete: not found; appending again continues the numbering.
	s.DeleteStream("order-1")
	_, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 10)
	require.Equal(t, esdb.ErrorCodeResourceNotFound, esdbCode(t, err))
	wr, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, jsonEvent("Again", `{}`))
	require.NoError(t, err)
	require.EqualValues(t, 5, wr.NextExpectedVersion)
	evs, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{5}, revisions(evs))

	// Client side soft delete and metadata.
	_, err = c.DeleteStream(ctx, "order-1", esdb.DeleteStreamOptions{ExpectedRevision: esdb.Revision(5)})
	require.NoError(t, err)
	_, err = readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 10)
	require.Equal(t, esdb.ErrorCodeResourceNotFound, esdbCode(t, err))

	seed(t, s, "order-3", 4)
	var meta esdb.StreamMetadata
	meta.SetTruncateBefore(2)
	_, err = c.SetStreamMetadata(ctx, "order-3", esdb.AppendToStreamOptions{}, meta)
	require.NoError(t, err)
	evs, err = readStream(t, c, "order-3", esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{2, 3}, revisions(evs))

	// Tombstone: stream deleted for reads and appends.
	_, err = c.TombstoneStream(ctx, "order-3", esdb.TombstoneStreamOptions{})
	require.NoError(t, err)
	_, err = readStream(t, c, "order-3", esdb.ReadStreamOptions{}, 10)
	require.Equal(t, esdb.ErrorCodeStreamDeleted, esdbCode(t, err))
	_, err = c.AppendToStream(ctx, "order-3", esdb.AppendToStreamOptions{}, jsonEvent("X", `{}`))
	require.Equal(t, esdb.ErrorCodeStreamDeleted, esdbCode(t, err))
	_, err = s.Append("order-3", esdbtest.Event{Type: "X"})
	require.Error(t, err)
}

func TestReadAll(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	seed(t, s, "a-1", 2)
	seed(t, s, "b-1", 2)
	seed(t, s, "a-2", 1)

	rs, err := c.ReadAll(ctxT(t), esdb.ReadAllOptions{}, 100)
	evs, err := readAll(t, rs, err)
	require.NoError(t, err)
	require.Len(t, evs, 5)
	var streams []string
	for i, ev := range evs {
		streams = append(streams, ev.Event.StreamID)
		require.NotNil(t, ev.Commit)
		require.Equal(t, ev.Event.Position.Commit, *ev.Commit)
		if i > 0 {
			require.Greater(t, ev.Event.Position.Commit, evs[i-1].Event.Position.Commit)
		}
	}
	require.Equal(t, []string{"a-1", "a-1", "b-1", "b-1", "a-2"}, streams)

	// Forwards from a position includes it.
	from := evs[2].Event.Position
	rs, err = c.ReadAll(ctxT(t), esdb.ReadAllOptions{From: from}, 2)
	got, err := readAll(t, rs, err)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, evs[2].Event.EventID, got[0].Event.EventID)
	require.Equal(t, evs[3].Event.EventID, got[1].Event.EventID)

	// Backwards from the end.
	rs, err = c.ReadAll(ctxT(t), esdb.ReadAllOptions{Direction: esdb.Backwards, From: esdb.End{}}, 2)
	got, err = readAll(t, rs, err)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, evs[4].Event.EventID, got[0].Event.EventID)
	require.Equal(t, evs[3].Event.EventID, got[1].Event.EventID)
}
