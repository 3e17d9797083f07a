package clientinternals

import (
	"fmt"
	"reflect"
	"time"
)

// Check reaches every field and method this package uses, on a
// transaction producer, a plain producer and a push consumer built by the
// client's constructors (started or not), without calling anything that
// talks to the network. It returns the first path that is missing.
func Check(txp, p, pc any) (err error) {
	defer guard(&err)
	dp, err := txInner(txp)
	if err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := partsOf(dp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := nameServers(dp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, _, err := CallbackChannel(txp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := partsOf(reflect.ValueOf(p)); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, _, err := CallbackChannel(p); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, err := nameServers(reflect.ValueOf(p)); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, err := consumerClient(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := TransactionProducerRefresher(txp); err != nil {
		return fmt.Errorf("transaction producer: %w", err)
	}
	if _, err := ProducerRefresher(p); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	if _, err := ConsumerRefresher(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := nameServers(reflect.ValueOf(pc)); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := queuePartsOf(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := ExpirePulls(pc, map[string]time.Time{"\x00none": {}}); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := PendingRequests(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := RebalanceLockOf(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	if _, err := Buffered(pc); err != nil {
		return fmt.Errorf("push consumer: %w", err)
	}
	return nil
}
