package txrmq

import (
	"maps"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/txmsg"
)

// The envelope conversions run once per message on every send and every
// delivery. These benchmarks keep their cost visible next to the codec's
// and the ID generator's (txmsg/codec_test.go, txmsg/id_test.go); the
// end-to-end figures are cmd/txbench's (docs/benchmarks.md).

// benchMessage is a typical event: an order-created body of about 150
// bytes, a tag, one business key and two user properties.
func benchMessage(sharded bool) *txmsg.Message {
	m := &txmsg.Message{
		ID:    txmsg.NewID(),
		Topic: "order-created",
		Tag:   "retail",
		Keys:  []string{"order-0001234567"},
		Body: []byte(`{"order_no":"order-0001234567","customer_id":4211,"sku":"SKU-004211",` +
			`"qty":2,"amount_cents":2210,"created_at":"2026-01-02T03:04:05.123456Z"}`),
		Properties: map[string]string{"tenant": "eu-1", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"},
	}
	if sharded {
		m.ShardingKey = "customer-4211"
	}
	return m
}

// benchExt is what a consumer receives for m: the producer's properties
// plus those the broker adds.
func benchExt(m *txmsg.Message) *primitive.MessageExt {
	pm := toPrimitive(m)
	props := maps.Clone(pm.GetProperties())
	props[primitive.PropertyUniqueClientMessageIdKeyIndex] = "7F0000010001187A9ACB1A2B3C4D0000"
	props[primitive.PropertyMinOffset] = "0"
	props[primitive.PropertyMaxOffset] = "1234"
	props[primitive.PropertyConsumeStartTime] = "1767322845123"
	ext := &primitive.MessageExt{
		MsgId:          "7F0000010001187A9ACB1A2B3C4D0000",
		BornTimestamp:  time.Now().UnixMilli(),
		ReconsumeTimes: 0,
	}
	ext.Topic = pm.Topic
	ext.Body = pm.Body
	ext.WithProperties(props)
	return ext
}

func BenchmarkToPrimitive(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sharded bool
	}{{"plain", false}, {"sharded", true}} {
		b.Run(bc.name, func(b *testing.B) {
			m := benchMessage(bc.sharded)
			if got := toPrimitive(m).GetProperty(txmsg.PropertyID); got != m.ID {
				b.Fatalf("ID property %q, want %q", got, m.ID)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = toPrimitive(m)
			}
		})
	}
}

func BenchmarkFromExt(b *testing.B) {
	m := benchMessage(true)
	ext := benchExt(m)
	r := fromExt(ext)
	if r.Message.ID != m.ID || r.Message.ShardingKey != m.ShardingKey || len(r.Message.Properties) != len(m.Properties) {
		b.Fatalf("fromExt(toPrimitive(m)) = %+v, want the envelope of %+v", r.Message, m)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = fromExt(ext)
	}
}

// BenchmarkEnvelopeRoundTrip is one message's whole in-process path:
// envelope to client message, then back as the consumer sees it.
func BenchmarkEnvelopeRoundTrip(b *testing.B) {
	m := benchMessage(false)
	b.ReportAllocs()
	for b.Loop() {
		_ = fromExt(benchExt(m))
	}
}
