package main_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
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
	rs := e.runAndServe(t, 11, 0, 30, 4)
	runBase, serveBase := rs.runBase, rs.serveBase

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
	rs.stop(t)
}

// TestDashboardAndAlertMetricsExist: every series the Grafana dashboard
// (docs/grafana/inorder.json) and the alert rules (docs/alerts.rules.yml)
// name is served on /metrics by a running worker (with effects) or a serve
// replica: a renamed or dropped series fails here, not silently in a
// dashboard that shows nothing or an alert that can never fire.
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	t.Parallel()
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile("../../docs/grafana/inorder.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.UID)
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs = append(exprs, tg.Expr)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err = os.ReadFile("../../docs/alerts.rules.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			// The runbook is a link, to a section that exists.
			u := r.Annotations["runbook_url"]
			require.Regexp(t, `^https://github\.com/inorder/inorder/blob/main/docs/operations\.md#[a-z0-9-]+$`, u, r.Alert)
			anchor := u[strings.IndexByte(u, '#')+1:]
			require.True(t, slices.Contains(headingAnchors(string(doc)), anchor), "%s: docs/operations.md has no section #%s", r.Alert, anchor)
		}
	}
	named := map[string]bool{}
	for _, e := range exprs {
		for _, m := range regexp.MustCompile(`\binorder_[a-z0-9_]+`).FindAllString(e, -1) {
			named[m] = true
		}
	}
	require.Greater(t, len(named), 25, "the expressions parse")

	// A worker with the ledger's webhooks, and a read replica.
	e := newEnv(t)
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer hook.Close()
	e.vars["INORDER_LEDGER_WEBHOOK_URL"] = hook.URL
	rs := e.runAndServe(t, 31, 0, 30, 6)
	runBase, serveBase := rs.runBase, rs.serveBase
	served := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for {
		for _, base := range []string{runBase, serveBase} {
			getJSON(t, base+"/healthz", nil) // an HTTP request to measure
			for name := range scrapeLabels(t, base) {
				served[name] = true
			}
		}
		if served["inorder_effects_attempts_total"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Positive(t, calls.Load(), "the webhooks ran")
	for name := range named {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && served[b] {
				base = b
			}
		}
		require.True(t, served[base], "%s is named by the dashboard or the alerts but not served by run or serve", name)
	}
	rs.stop(t)
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings.
func headingAnchors(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(md, -1) {
		a := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				return r
			case r >= 'A' && r <= 'Z':
				return r + 'a' - 'A'
			case r == ' ':
				return '-'
			}
			return -1
		}, m[1])
		out = append(out, a)
	}
	return out
}
