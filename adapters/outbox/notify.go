package outbox

// Notify wakes the relays built with this Outbox ([NewRelay]) so
// they look for pending rows now instead of at their next poll. Transact
// calls it after each commit. Call it after committing a transaction in
// which you called [Outbox.EnqueueTx]; gorm offers no after-commit hook to
// do it for you. Notify never blocks; a relay already woken stays woken
// once.
func (o *Outbox) Notify() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for ch := range o.wakers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribe returns a channel that receives a value after Notify, buffered
// by one so nudges coalesce, and the function that stops it.
func (o *Outbox) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	o.mu.Lock()
	o.wakers[ch] = struct{}{}
	o.mu.Unlock()
	return ch, func() {
		o.mu.Lock()
		delete(o.wakers, ch)
		o.mu.Unlock()
	}
}
