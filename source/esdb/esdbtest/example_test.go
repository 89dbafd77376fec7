package esdbtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// Start a server, append two events with the real client and read them back.
func Example() {
	srv, err := esdbtest.Start(nil) // in a test: srv := esdbtest.New(t)
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	cfg, err := esdb.ParseConnectionString(srv.URL())
	if err != nil {
		panic(err)
	}
	cfg.Logger = esdb.NoopLogging()
	client, err := esdb.NewClient(cfg)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	_, err = client.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}},
		esdb.EventData{EventType: "OrderPlaced", ContentType: esdb.ContentTypeJson, Data: []byte(`{"total":42}`)},
		esdb.EventData{EventType: "OrderPaid", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`)},
	)
	if err != nil {
		panic(err)
	}

	stream, err := client.ReadStream(ctx, "order-1", esdb.ReadStreamOptions{From: esdb.Start{}}, 100)
	if err != nil {
		panic(err)
	}
	defer stream.Close()
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.Event.EventNumber, ev.Event.EventType, string(ev.Event.Data))
	}
	// Output:
	// 0 OrderPlaced {"total":42}
	// 1 OrderPaid {}
}
