package projection

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// This file holds the processor's tracing: one OpenTelemetry span per
// Process call that carries deliveries (inorder.process), linked to the
// traces its events were produced in, with a child span per transaction
// attempt (inorder.transaction), per handler call (inorder.handler) and per
// COMMIT (inorder.commit). The children are made only under a recording
// span: untraced batches pay nothing for them.

// tracerName is the instrumentation scope of the processor's spans.
const tracerName = "github.com/inorder/inorder/projection"

// maxSpanLinks caps the links of one batch span to its events' traces.
const maxSpanLinks = 32

// tracer returns the processor's tracer: Config.TracerProvider's, or one
// that records nothing.
func (c *Config) tracer() trace.Tracer {
	if c.TracerProvider == nil {
		return noop.NewTracerProvider().Tracer(tracerName)
	}
	return c.TracerProvider.Tracer(tracerName)
}

// startBatchSpan starts the span of one Process call. Events whose metadata
// carries a W3C trace context (a "traceparent" member, and "tracestate") are
// linked to it: a batch serves many traces, so it is the child of none.
func (p *Processor) startBatchSpan(ctx context.Context, bt *batch) (context.Context, trace.Span) {
	if len(bt.Events) == 0 && len(bt.Rejects) == 0 {
		// A batch with nothing to process (a checkpoint alone) is no
		// operation to trace.
		return ctx, noSpan
	}
	var links []trace.Link
	seen := map[trace.SpanID]bool{}
	prop := propagation.TraceContext{}
	for _, e := range bt.Events {
		if len(links) == maxSpanLinks {
			break
		}
		if len(e.Metadata) == 0 || !json.Valid(e.Metadata) {
			continue
		}
		var carrier map[string]any
		if json.Unmarshal(e.Metadata, &carrier) != nil {
			continue
		}
		tp, ok := carrier["traceparent"].(string)
		if !ok {
			continue
		}
		mc := propagation.MapCarrier{"traceparent": tp}
		if ts, ok := carrier["tracestate"].(string); ok {
			mc["tracestate"] = ts
		}
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), mc))
		if sc.IsValid() && !seen[sc.SpanID()] {
			seen[sc.SpanID()] = true
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return p.tracer.Start(ctx, "inorder.process", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("inorder.source", bt.Source),
			attribute.StringSlice("inorder.projections", p.Projections()),
			attribute.Int("inorder.events", len(bt.Events)),
		))
}

// endBatchSpan ends a batch's span with its attempts and outcome counts, or
// its error.
func endBatchSpan(span trace.Span, bt *batch, err error) {
	span.SetAttributes(attribute.Int("inorder.attempts", bt.attempts))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "batch not committed")
	} else {
		counts := make([]int, len(outcomeNames))
		for _, r := range bt.results {
			counts[r.Outcome]++
		}
		for _, o := range Outcomes {
			if counts[o] > 0 {
				span.SetAttributes(attribute.Int("inorder.outcome."+o.String(), counts[o]))
			}
		}
	}
	span.End()
}

// retried records on ctx's span that an attempt failed for reason and is
// tried again.
func retried(ctx context.Context, reason string, err error) {
	trace.SpanFromContext(ctx).AddEvent("inorder.retry", trace.WithAttributes(
		attribute.String("inorder.retry.reason", reason), attribute.String("error", err.Error())))
}

// noSpan is the span of what is not traced: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// childSpan starts a child of ctx's span — when that one records; else it
// returns ctx and noSpan.
func (p *Processor) childSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return p.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends a child span, with err as its status.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}

// transaction runs fn in a transaction of its own and commits it, as
// pgx.BeginFunc does, in a span of the attempt (inorder.transaction) with a
// child for the COMMIT (inorder.commit); began is set once BEGIN
// succeeded. fn gets the span's context.
func (p *Processor) transaction(ctx context.Context, attempt int, m txMode, began *bool, fn func(context.Context, pgx.Tx) error) (err error) {
	ctx, span := p.childSpan(ctx, "inorder.transaction", attribute.Int("inorder.attempt", attempt),
		attribute.String("inorder.mode", m.String()))
	defer func() { endSpan(span, err) }()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	*began = true
	defer func() {
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = rerr
		}
	}()
	if ferr := fn(ctx, tx); ferr != nil {
		_ = tx.Rollback(ctx) // the error to return is fn's
		return ferr
	}
	_, cspan := p.childSpan(ctx, "inorder.commit")
	err = tx.Commit(ctx)
	endSpan(cspan, err)
	return err
}
