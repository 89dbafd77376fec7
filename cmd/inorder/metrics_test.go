package main_test

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// documentedMetric is a row of docs/metrics.md.
type documentedMetric struct {
	labels   []string
	servedBy []string
}

// documentedMetrics parses the table of docs/metrics.md.
func documentedMetrics(t *testing.T) map[string]documentedMetric {
	t.Helper()
	doc, err := os.ReadFile("../../docs/metrics.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `(inorder_[a-z_]+)` \\| (\\w+) \\|([^|]*)\\|[^|]+\\|([^|]+)\\|")
	out := map[string]documentedMetric{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var d documentedMetric
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				d.labels = append(d.labels, l)
			}
		}
		slices.Sort(d.labels)
		for _, s := range strings.Split(m[4], ",") {
			d.servedBy = append(d.servedBy, strings.TrimSpace(s))
		}
		out[m[1]] = d
	}
	require.Greater(t, len(out), 10, "the table parses")
	return out
}

// scrapeLabels returns the label names of every inorder_* family served
// at base/metrics (histogram le labels left out).
func scrapeLabels(t *testing.T, base string) map[string][]string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := map[string][]string{}
	for name, f := range families {
		if !strings.HasPrefix(name, "inorder_") {
			continue
		}
		labels := []string{}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName())
			}
			slices.Sort(ls)
			if len(labels) > 0 {
				require.Equal(t, labels, ls, "%s: every series has the same labels", name)
			}
			labels = ls
		}
		out[name] = labels
	}
	return out
}

// TestMetricsDocumented scrapes a worker and a serve replica: every
// inorder_* series is in docs/metrics.md with its label set, and every
// documented series is served where the doc says.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	doc := documentedMetrics(t)
	e.run(t, "migrate")
	w := e.workload(t, 11, 0, 30, 4)
	run := e.start(t, "run", "--http-addr", "127.0.0.1:0", "--batch-size", "10")
	runBase := run.baseURL(t)
	e.waitApplied(t, int64(len(w)), time.Minute)
	serve := e.start(t, "serve", "--http-addr", "127.0.0.1:0")
	serveBase := serve.baseURL(t)

	for _, p := range []struct{ name, base string }{{"run", runBase}, {"serve", serveBase}} {
		getJSON(t, p.base+"/healthz", nil) // an HTTP request to measure
		got := scrapeLabels(t, p.base)
		for name, labels := range got {
			d, ok := doc[name]
			require.True(t, ok, "%s serves %s, which docs/metrics.md does not list", p.name, name)
			require.Equal(t, d.labels, labels, "%s: labels of %s differ from docs/metrics.md", p.name, name)
			require.True(t, slices.Contains(d.servedBy, p.name) || slices.Contains(d.servedBy, p.name+" with effects"),
				"docs/metrics.md says %s is not served by %s", name, p.name)
		}
		for name, d := range doc {
			if slices.Contains(d.servedBy, p.name) { // not "run with effects": optional
				require.Contains(t, got, name, "docs/metrics.md lists %s for %s, which does not serve it", name, p.name)
			}
		}
	}
	for _, p := range []*process{run, serve} {
		p.signal(t, syscall.SIGTERM)
		require.NoError(t, p.wait(t, time.Minute))
	}
}
