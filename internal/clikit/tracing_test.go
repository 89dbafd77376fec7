package clikit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
)

func TestInstrumentHTTP(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	mux := http.NewServeMux()
	var inner trace.SpanContext
	mux.HandleFunc("GET /v1/projections/{name}/aggregates/{id}", func(w http.ResponseWriter, r *http.Request) {
		inner = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /boom", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	m := metrics.New(emptyProcessor(t), &metrics.Options{NoRuntime: true})
	h := clikit.InstrumentHTTP(mux, m, &clikit.Tracing{Provider: tp, Propagator: propagation.TraceContext{}})

	req := httptest.NewRequest(http.MethodGet, "/v1/projections/ledger/aggregates/pay-1", nil)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req.Header.Set("traceparent", parent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/boom", nil))

	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	s := spans[0]
	require.Equal(t, "GET /v1/projections/{name}/aggregates/{id}", s.Name, "named by route, not path")
	require.Equal(t, trace.SpanKindServer, s.SpanKind)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext.TraceID().String(), "the caller's trace continues")
	require.Equal(t, "00f067aa0ba902b7", s.Parent.SpanID().String())
	require.Equal(t, s.SpanContext.SpanID(), inner.SpanID(), "the handler runs in the span")
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	require.Equal(t, "200", attrs["http.response.status_code"])
	require.Equal(t, "GET /v1/projections/{name}/aggregates/{id}", attrs["http.route"])
	require.Equal(t, codes.Error, spans[1].Status.Code, "5xx is an error")

	// The same requests, measured by route, not path.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rec.Body.String(), `inorder_http_request_duration_seconds_count{code="200",route="GET /v1/projections/{name}/aggregates/{id}"} 1`)
	require.Contains(t, rec.Body.String(), `inorder_http_request_duration_seconds_count{code="500",route="GET /boom"} 1`)

	// Without tracing or metrics it only serves.
	rec = httptest.NewRecorder()
	clikit.InstrumentHTTP(mux, nil, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/boom", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
}

// emptyProcessor is a processor without a database, for metrics that read
// none.
func emptyProcessor(t *testing.T) *projection.Processor {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	proc, err := projection.New(pool, nil, ledger.New(nil))
	require.NoError(t, err)
	return proc
}

func TestNewTracing(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tt := range []struct {
		name    string
		getenv  func(string) string
		enabled bool
		usage   bool
	}{
		{name: "OffByDefault", getenv: env()},
		{name: "Endpoint", getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"), enabled: true},
		{name: "TracesEndpointGRPC", getenv: env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), enabled: true},
		{name: "ExporterOTLP", getenv: env("OTEL_TRACES_EXPORTER", "otlp"), enabled: true},
		{name: "None", getenv: env("OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")},
		{name: "Disabled", getenv: env("OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp")},
		{name: "UnknownExporter", getenv: env("OTEL_TRACES_EXPORTER", "zipkin"), usage: true},
		{name: "UnknownProtocol", getenv: env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), usage: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := clikit.NewTracing(t.Context(), tt.getenv, "inorder", "v0")
			if tt.usage {
				require.ErrorIs(t, err, clikit.ErrUsage)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.enabled, tr.Enabled())
			require.NoError(t, tr.Shutdown(t.Context()))
		})
	}
}
