package kafka_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/kafka"
)

// TestDriver opens the source as 'inorder run --source kafka://…' does: its
// flags, its URL, a run to the fold, a replay, and a replay refused once
// retention removed records.
func TestDriver(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := setup(t)
	pr := producer(t, c)
	events := ledger.Generate(rand.New(rand.NewPCG(11, 11)), 50, 4)
	produce(t, pr, events)
	url := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "/" + testTopic + "?group=drv"

	d := kafka.Driver()
	require.Equal(t, []string{"kafka", "kafka+tls"}, d.Schemes())
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o := d.Bind(fs, "run")
	require.NoError(t, fs.Parse([]string{"--kafka-session-timeout=3s", "--version-from=header:Inorder-Version"}))
	require.NoError(t, o.Validate(url))
	require.ErrorContains(t, o.Validate("kafka://"+c.ListenAddrs()[0]), "no Kafka topic")
	require.ErrorContains(t, o.Validate("kafka:///payments"), "no broker")
	bad := pflag.NewFlagSet("run", pflag.ContinueOnError)
	ob := d.Bind(bad, "run")
	require.NoError(t, bad.Parse([]string{"--aggregate-from=subject:2"}))
	require.ErrorContains(t, ob.Validate(url), "Mapping.Aggregate")

	ready := make(chan struct{}, 1)
	feed, err := o.Open(t.Context(), url, &source.OpenConfig{Processor: b.Proc, Name: "kafka", Logger: testLogger(t),
		OnReady: func() {
			select {
			case ready <- struct{}{}:
			default:
			}
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	<-ready
	waitFor(t, "lag 0", func() bool {
		l, err := feed.MeasureLag(t.Context())
		return err == nil && l.Known && l.Events == 0
	})
	cancel()
	require.NoError(t, <-done)
	b.RequireFold(t, events)

	rfs := pflag.NewFlagSet("rebuild", pflag.ContinueOnError)
	ro := d.Bind(rfs, "rebuild")
	require.NoError(t, rfs.Parse(nil))
	var notes []string
	r, err := ro.Replayer(t.Context(), url, &source.OpenConfig{Name: "kafka", Logger: testLogger(t), Processor: b.Proc,
		Note: func(m string) { notes = append(notes, m) }})
	require.NoError(t, err)
	require.Equal(t, []string{`reading the topics as the workers of source kafka do: --aggregate-from "key" --version-from "header:Inorder-Version" --type-from "header:Inorder-Type" --id-from "header:Inorder-Id"`}, notes,
		"a rebuild without mapping flags reads as the workers recorded")
	_, err = b.Proc.Build(t.Context(), "ledger", &projection.BuildOptions{InPlace: true, Replay: r.Replay})
	require.NoError(t, err)
	b.RequireFold(t, events)
	require.InDelta(t, 1.0, r.Progress().Fraction, 1e-9)

	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: testTopic, Partition: 0, At: 1})
	resp, err := kadm.NewClient(pr).DeleteRecords(t.Context(), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	_, err = ro.Replayer(t.Context(), url, &source.OpenConfig{Name: "kafka", Logger: testLogger(t)})
	require.ErrorIs(t, err, kafka.ErrTruncated, "a rebuild is refused before it empties anything")
}
