package projection_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// TestTracing checks the batch span: its attributes, its links to the
// traces named in the events' metadata, and the error of a failed batch.
func TestTracing(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, &projection.Config{TracerProvider: tp})

	traceparent := func(i int) []byte {
		return fmt.Appendf(nil, `{"traceparent":"00-%032x-%016x-01","other":1}`, i+1, i+1)
	}
	var events []aggregate.Event
	for i, typ := range []string{ledger.Authorized, ledger.Approved} {
		e, err := aggregate.New("pay-1", int64(i+1), typ, ledger.Data{Payer: "a", Payee: "b", Amount: 4})
		require.NoError(t, err)
		e.Metadata = traceparent(i)
		events = append(events, e)
	}
	events = append(events, events[1]) // a duplicate, same trace
	events = append(events, aggregate.Event{Aggregate: "", Version: 1, Type: "x", Data: []byte(`{}`), Metadata: []byte(`{"traceparent":"garbage"}`)})
	_, err := b.proc.Process(t.Context(), projection.Batch{Events: events, Source: "traced"})
	require.NoError(t, err)

	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	s := spans[0]
	require.Equal(t, "inorder.process", s.Name)
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes {
		attrs[a.Key] = a.Value
	}
	require.Equal(t, "traced", attrs["inorder.source"].AsString())
	require.Equal(t, []string{"ledger"}, attrs["inorder.projections"].AsStringSlice())
	require.EqualValues(t, 4, attrs["inorder.events"].AsInt64())
	require.EqualValues(t, 1, attrs["inorder.attempts"].AsInt64())
	require.EqualValues(t, 2, attrs["inorder.outcome.applied"].AsInt64())
	require.EqualValues(t, 1, attrs["inorder.outcome.duplicate"].AsInt64())
	require.EqualValues(t, 1, attrs["inorder.outcome.rejected"].AsInt64())
	require.Len(t, s.Links, 2, "one link per distinct trace context; garbage is ignored")
	require.Equal(t, fmt.Sprintf("%032x", 1), s.Links[0].SpanContext.TraceID().String())
	require.Equal(t, codes.Unset, s.Status.Code)

	exp.Reset()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = b.proc.Process(ctx, projection.Batch{Events: events[:1]})
	require.Error(t, err)
	spans = exp.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, codes.Error, spans[0].Status.Code)
	require.NotEmpty(t, spans[0].Events, "the error is recorded")
}
