package effects

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric settings of RegisterMetrics.
const (
	// metricsNamespace prefixes the metric names, as package metrics does.
	metricsNamespace = "inorder"
	// metricsCacheTTL is how long a scrape reuses the intents read from the
	// database.
	metricsCacheTTL = 2 * time.Second
	// metricsQueryTimeout bounds a scrape's database read.
	metricsQueryTimeout = time.Second
)

// RegisterMetrics registers the Client's metrics on reg:
//
//   - inorder_effects_intents{kind,state}: open intents (pending, running,
//     retrying, failed), read from the database;
//   - inorder_effects_uncertain{kind}: open intents whose last outcome is
//     unknown;
//   - inorder_effects_oldest_pending_age_seconds{kind}: how long the oldest
//     pending or retrying intent has waited (0: none);
//   - inorder_effects_orphaned{kind}: open intents whose executor died and
//     that no River job will take up yet (see Recovery): the next
//     reconciliation pass of any running Client recovers them;
//   - inorder_effects_status_up: 1 when the last read succeeded;
//   - inorder_effects_attempts_total{kind,outcome}: this process's attempts
//     by outcome (done, retrying, failed, unrecorded: the outcome could not
//     be written) — reconciliations included;
//   - inorder_effects_recoveries_total{kind,cause}: intents this process's
//     reconciliation passes took up after their executor died, by cause
//     (claim_expired, job_died, relay_died).
//
// Database reads are reused for 2 s and bounded to 1 s per scrape.
func (c *Client) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(&collector{c: c})
}

// collector is the Prometheus collector of a Client.
type collector struct {
	c *Client

	mu    sync.Mutex
	at    time.Time
	stats []KindStats
	err   error
}

var (
	descIntents = prometheus.NewDesc(metricsNamespace+"_effects_intents",
		"Open effect intents by kind and state (pending, running, retrying, failed).", []string{"kind", "state"}, nil)
	descUncertain = prometheus.NewDesc(metricsNamespace+"_effects_uncertain",
		"Open effect intents whose last attempt's outcome is unknown.", []string{"kind"}, nil)
	descOldest = prometheus.NewDesc(metricsNamespace+"_effects_oldest_pending_age_seconds",
		"Age of the oldest pending or retrying effect intent (0 when there is none).", []string{"kind"}, nil)
	descOrphaned = prometheus.NewDesc(metricsNamespace+"_effects_orphaned",
		"Open effect intents whose executor died and that no River job will take up yet.", []string{"kind"}, nil)
	descRecoveries = prometheus.NewDesc(metricsNamespace+"_effects_recoveries_total",
		"Effect intents this process's reconciliation passes took up after their executor died, by kind and cause (claim_expired, job_died, relay_died).", []string{"kind", "cause"}, nil)
	descUp = prometheus.NewDesc(metricsNamespace+"_effects_status_up",
		"1 when the last read of the effects table succeeded, else 0.", nil, nil)
	descAttempts = prometheus.NewDesc(metricsNamespace+"_effects_attempts_total",
		"Effect attempts made by this process, by kind and outcome (done, retrying, failed, unrecorded).", []string{"kind", "outcome"}, nil)
)

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIntents, descUncertain, descOldest, descOrphaned, descUp, descAttempts, descRecoveries} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	stats, err := m.read()
	up := 1.0
	if err != nil {
		up = 0
		m.c.log.Warn("effects metrics: read intents", "error", err)
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up)
	now := time.Now()
	for _, s := range stats {
		for _, st := range []struct {
			state State
			n     int64
		}{{Pending, s.Pending}, {Running, s.Running}, {Retrying, s.Retrying}, {Failed, s.Failed}} {
			ch <- prometheus.MustNewConstMetric(descIntents, prometheus.GaugeValue, float64(st.n), s.Kind, string(st.state))
		}
		ch <- prometheus.MustNewConstMetric(descUncertain, prometheus.GaugeValue, float64(s.Uncertain), s.Kind)
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, s.OldestPendingAge(now).Seconds(), s.Kind)
		ch <- prometheus.MustNewConstMetric(descOrphaned, prometheus.GaugeValue, float64(s.Orphaned), s.Kind)
	}
	for k, n := range m.c.tally.snapshot() {
		ch <- prometheus.MustNewConstMetric(descAttempts, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for k, n := range m.c.tally.recoveries() {
		ch <- prometheus.MustNewConstMetric(descRecoveries, prometheus.CounterValue, float64(n), k[0], k[1])
	}
}

// read returns the intents' stats, from the cache when it is fresh.
func (m *collector) read() ([]KindStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.at.IsZero() && time.Since(m.at) < metricsCacheTTL {
		return m.stats, m.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsQueryTimeout)
	defer cancel()
	stats, err := m.c.Stats(ctx)
	if err != nil {
		stats = m.stats // keep the last known values
	}
	m.at, m.stats, m.err = time.Now(), stats, err
	return stats, err
}
