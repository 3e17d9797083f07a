//go:build wireinject

package main

import (
	"log/slog"

	"github.com/google/wire"
)

// The two injectors differ only in their mode set: that is the whole
// difference between the modes. Regenerate wire_gen.go after editing:
//
//	go run github.com/google/wire/cmd/wire ./examples/orderservice

func newTransactionalApp(cfg Config, log *slog.Logger) (*App, func(), error) {
	wire.Build(commonSet, transactionalSet)
	return nil, nil, nil
}

func newOutboxApp(cfg Config, log *slog.Logger) (*App, func(), error) {
	wire.Build(commonSet, outboxSet)
	return nil, nil, nil
}
