package clikit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inorder/inorder/internal/httpstatus"
	"github.com/inorder/inorder/metrics"
)

// Tracing is the process's OpenTelemetry tracing: a TracerProvider that
// exports over OTLP when the standard OTEL_* variables ask for it, and a
// no-op one otherwise.
type Tracing struct {
	// Provider makes the tracers: the HTTP API's spans, the processor's
	// batch spans.
	Provider trace.TracerProvider
	// Propagator reads and writes trace context (W3C traceparent and
	// baggage).
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// Shutdown flushes and stops the exporter, if any.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t.shutdown != nil }

// NewTracing reads the standard variables through getenv: tracing is on
// when OTEL_TRACES_EXPORTER is "otlp", or when it is unset and
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set;
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off.
// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL chooses grpc or http/protobuf (the
// default); the exporter reads the other OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, TLS) itself, and the resource OTEL_SERVICE_NAME
// (default service) and OTEL_RESOURCE_ATTRIBUTES.
func NewTracing(ctx context.Context, getenv func(string) string, service, version string) (*Tracing, error) {
	t := &Tracing{
		Provider:   noop.NewTracerProvider(),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	switch {
	case strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true"):
		return t, nil
	case exporter == "" && !endpoint, exporter == "none":
		return t, nil
	case exporter != "" && exporter != "otlp":
		return nil, Usagef("OTEL_TRACES_EXPORTER=%q: this binary exports otlp or none", exporter)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, Usagef("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.Environment(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.Provider, t.shutdown = tp, tp.Shutdown
	return t, nil
}

// InstrumentHTTP returns h measured and traced: m (if set) observes every
// request's duration by route and status code; t (if set) makes a server
// span of it with otelhttp — continuing the trace context of the request's
// headers, named after the route (the ServeMux pattern that matched), with
// the semantic conventions' attributes, 5xx answers marked as errors.
func InstrumentHTTP(h http.Handler, m *metrics.Metrics, t *Tracing) http.Handler {
	measured := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &httpstatus.Recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		m.ObserveHTTP(r.Pattern, rec.Status(), time.Since(start))
		if r.Pattern != "" {
			trace.SpanFromContext(r.Context()).SetAttributes(semconv.HTTPRoute(r.Pattern))
		}
	})
	if t == nil {
		return measured
	}
	return otelhttp.NewHandler(measured, "http",
		otelhttp.WithTracerProvider(t.Provider), otelhttp.WithPropagators(t.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}),
		// The metrics are inorder's own (route and code labels).
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()))
}
