// Package envelope turns a broker message into an [aggregate.Event] by a
// mapping of specs, one per part of the event, with one syntax for every
// broker source (Kafka, NATS JetStream):
//
//	header:NAME   the value of header NAME (the first, if repeated)
//	field:PATH    a field of the JSON payload: a top-level name, or a
//	              dotted path ("meta.version") into nested objects; a
//	              string's contents, any other value as written
//	key           the record key (Kafka)
//	subject:N     the N-th token of the subject (NATS; 1-based, negative
//	              counts from the end: -1 is the last)
//	subject       the whole subject (NATS)
//
// A source says which kinds it has (Parse's allowed kinds) and answers the
// specs that are not payload fields through [Message]; [Mapping.Event]
// resolves payload fields itself and builds the event, or an
// *aggregate.ValidationError naming what is missing or invalid, with what is
// known of the event for the rejected table.
package envelope
