package txmsg

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Codec turns events of type T into message bodies and back.
type Codec[T any] interface {
	// Encode returns the body for v.
	Encode(v T) ([]byte, error)
	// Decode parses a body. An error here means the body can never be
	// handled; consumers park the message instead of retrying it.
	Decode(body []byte) (T, error)
}

// JSONCodec is the default [Codec]: encoding/json. Decode rejects bodies
// with unknown fields only when Strict is set.
type JSONCodec[T any] struct {
	// Strict makes Decode fail on fields T does not have. The default,
	// false, lets producers add fields before consumers know them.
	Strict bool
}

// Encode implements Codec.
func (c JSONCodec[T]) Encode(v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("txmsg: encode %T as JSON: %w", v, err)
	}
	return b, nil
}

// Decode implements Codec.
func (c JSONCodec[T]) Decode(body []byte) (T, error) {
	var v T
	if c.Strict {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return v, fmt.Errorf("%w: as JSON into %T: %w", ErrDecode, v, err)
		}
		return v, nil
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("%w: as JSON into %T: %w", ErrDecode, v, err)
	}
	return v, nil
}
