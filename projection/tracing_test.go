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
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range spans {
		byName[sp.Name] = sp
	}
	require.Len(t, spans, 4, "the batch, its transaction, the handler, the commit: %v", spanNames(spans))
	s := byName["inorder.process"]
	require.Equal(t, "inorder.process", s.Name)
	// The transaction is the batch's child; the handler and the commit
	// are the transaction's.
	tx, handler, commit := byName["inorder.transaction"], byName["inorder.handler"], byName["inorder.commit"]
	require.Equal(t, s.SpanContext.SpanID(), tx.Parent.SpanID())
	require.Equal(t, tx.SpanContext.SpanID(), handler.Parent.SpanID())
	require.Equal(t, tx.SpanContext.SpanID(), commit.Parent.SpanID())
	require.Contains(t, handler.Attributes, attribute.String("inorder.projection", "ledger"))
	require.Contains(t, handler.Attributes, attribute.Int("inorder.events", 2))
	require.Contains(t, tx.Attributes, attribute.Int("inorder.attempt", 1))
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
	var failed tracetest.SpanStub
	for _, sp := range spans {
		if sp.Name == "inorder.process" {
			failed = sp
		}
	}
	require.Equal(t, codes.Error, failed.Status.Code, "%v", spanNames(spans))
	require.NotEmpty(t, failed.Events, "the error is recorded")

	// A batch with nothing to process is no span (a source saving its
	// checkpoint every few seconds must not flood the traces).
	exp.Reset()
	_, err = b.proc.Process(t.Context(), projection.Batch{Source: "idle"})
	require.NoError(t, err)
	require.Empty(t, exp.GetSpans())
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
