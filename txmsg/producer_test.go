package txmsg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/txmsg"
)

// recordingTransactor captures what a Producer hands to its Transactor.
type recordingTransactor struct{ got *txmsg.Message }

func (r *recordingTransactor) Transact(_ context.Context, m *txmsg.Message, _ txmsg.LocalTx) (*txmsg.Receipt, error) {
	r.got = m
	return &txmsg.Receipt{ID: "x", State: txmsg.StateCommitted}, nil
}

type event struct {
	N int `json:"n"`
}

func TestNewProducerValidates(t *testing.T) {
	t.Parallel()
	_, err := txmsg.NewProducer[event](nil, txmsg.Topic[event]{Name: "ok"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	_, err = txmsg.NewProducer[event](&recordingTransactor{}, txmsg.Topic[event]{Name: "bad topic"})
	require.ErrorIs(t, err, txmsg.ErrInvalidConfig)
	require.ErrorIs(t, err, txmsg.ErrInvalidTopic)
}

func TestProducerBuildsEnvelope(t *testing.T) {
	t.Parallel()
	rec := &recordingTransactor{}
	p, err := txmsg.NewProducer(rec, txmsg.Topic[event]{Name: "events", Tag: "default"})
	require.NoError(t, err)
	_, err = p.Send(context.Background(), event{N: 3}, func(context.Context, *gorm.DB) error { return nil },
		txmsg.WithKeys("order-3"), txmsg.WithShardingKey("user-1"), txmsg.WithProperty("p", "v"), txmsg.WithID("fixed"))
	require.NoError(t, err)
	require.Equal(t, &txmsg.Message{
		ID: "fixed", Topic: "events", Tag: "default", Keys: []string{"order-3"}, ShardingKey: "user-1",
		Body: []byte(`{"n":3}`), Properties: map[string]string{"p": "v"},
	}, rec.got)

	_, err = p.Send(context.Background(), event{N: 4}, nil, txmsg.WithTag("other"))
	require.NoError(t, err, "the Transactor, not the Producer, rejects a nil local")
	require.Equal(t, "other", rec.got.Tag)
}

type failingCodec struct{}

func (failingCodec) Encode(event) ([]byte, error) { return nil, errors.New("cannot encode") }
func (failingCodec) Decode([]byte) (event, error) { return event{}, errors.New("cannot decode") }

func TestProducerEncodeErrorSendsNothing(t *testing.T) {
	t.Parallel()
	rec := &recordingTransactor{}
	p, err := txmsg.NewProducer(rec, txmsg.Topic[event]{Name: "events", Codec: failingCodec{}})
	require.NoError(t, err)
	_, err = p.Send(context.Background(), event{}, func(context.Context, *gorm.DB) error { return nil })
	require.ErrorIs(t, err, txmsg.ErrInvalidMessage)
	require.Nil(t, rec.got)
}
