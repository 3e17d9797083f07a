package outbox

// Running reports whether Run is running: it has begun and has not
// returned yet.
func (r *Relay) Running() bool { return r.running.Load() }
