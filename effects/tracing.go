package effects

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// This file holds the effects' tracing (Config.TracerProvider): a span per
// handler call, in whose context the handler runs.

// tracerName is the instrumentation scope of the effects' spans.
const tracerName = "github.com/inorder/inorder/effects"

// traceAttempt starts the span of one handler call and returns the context
// to call it in and the function that ends the span with its error.
func (c *Client) traceAttempt(ctx context.Context, e *Effect) (context.Context, func(error)) {
	if c.cfg.TracerProvider == nil {
		return ctx, func(error) {}
	}
	ctx, span := c.cfg.TracerProvider.Tracer(tracerName).Start(ctx, "inorder.effect "+e.Kind,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
			attribute.String("inorder.effect.kind", e.Kind),
			attribute.String("inorder.effect.key", e.Key),
			attribute.Int("inorder.effect.attempt", e.Attempts),
			attribute.String("inorder.projection", e.Projection),
			attribute.String("inorder.aggregate", e.Aggregate),
			attribute.Int64("inorder.version", e.Version),
			attribute.String("inorder.event_id", e.EventID),
		))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "effect failed")
		}
		span.End()
	}
}
