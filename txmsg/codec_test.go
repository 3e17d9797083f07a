package txmsg

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type orderCreated struct {
	OrderID  int64  `json:"order_id"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

func TestJSONCodecRoundTrip(t *testing.T) {
	t.Parallel()
	c := JSONCodec[orderCreated]{}
	in := orderCreated{OrderID: 7, SKU: "sku-1", Quantity: 3}
	b, err := c.Encode(in)
	require.NoError(t, err)
	out, err := c.Decode(b)
	require.NoError(t, err)
	require.Equal(t, in, out)
}

func TestJSONCodecDecodeErrors(t *testing.T) {
	t.Parallel()
	_, err := JSONCodec[orderCreated]{}.Decode([]byte("not json"))
	require.ErrorIs(t, err, ErrDecode)
	_, err = JSONCodec[orderCreated]{}.Decode([]byte(`{"order_id":"seven"}`))
	require.ErrorIs(t, err, ErrDecode)
	_, err = JSONCodec[orderCreated]{Strict: true}.Decode([]byte(`{"order_id":1,"extra":2}`))
	require.ErrorIs(t, err, ErrDecode)
	v, err := JSONCodec[orderCreated]{}.Decode([]byte(`{"order_id":1,"extra":2}`))
	require.NoError(t, err)
	require.EqualValues(t, 1, v.OrderID)
}

func BenchmarkJSONCodec(b *testing.B) {
	c := JSONCodec[orderCreated]{}
	in := orderCreated{OrderID: 7, SKU: "sku-1", Quantity: 3}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		body, _ := c.Encode(in)
		if _, err := c.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}
