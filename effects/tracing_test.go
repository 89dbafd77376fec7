package effects_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inorder/inorder/effects"
)

// TestTracing: with Config.TracerProvider every handler call is a span
// with the effect's kind, key and event.
func TestTracing(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setup(t, &setupOpts{config: func(c *effects.Config) { c.TracerProvider = tp }})
	es := events(t, "a", 2)
	b.process(t, es...)
	b.start(t)
	b.waitAllDone(t)
	keys := map[string]bool{}
	for _, s := range exp.GetSpans() {
		if s.Name != "inorder.effect "+kindNotify {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "inorder.effect.key" {
				keys[a.Value.AsString()] = true
			}
		}
		require.Contains(t, s.Attributes, attribute.String("inorder.projection", "notifier"))
	}
	for _, e := range es {
		require.True(t, keys[keyOf(kindNotify, e)], "a span for the effect of version %d", e.Version)
	}
}
