package stack_test

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/internal/testbed"
)

// exampleBed gives an example a database of its own, with the Order
// table, a topic and a producer group.
func exampleBed(prefix string) (*gorm.DB, string, string) {
	db, _ := testbed.ExampleDB(prefix)
	if err := db.AutoMigrate(&Order{}); err != nil {
		panic(err)
	}
	return db, testbed.ExampleTopic(prefix), testbed.ExampleName(prefix)
}

func nameServers() []string { return []string{testbed.NameServer()} }

// waitSent waits until the outbox holds at least sent sent rows and
// nothing pending, for a minute at most.
func waitSent(ctx context.Context, ob *outbox.Outbox, sent int64) (outbox.Stats, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := ob.Stats(ctx)
		if err == nil && s.Sent >= sent && s.Pending == 0 {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, errors.Join(err, errors.New("rows not sent within a minute"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
