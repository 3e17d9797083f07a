package txrmq

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/txmsg/txmsg/adapters/txrmq/internal/clientinternals"
)

// reconnector brings a client back in seconds after a broker restart.
//
// Left alone, the client learns of a broker that came back from its 30 s
// route refresh, and the broker learns of the client (its producer group,
// whose check-backs it sends; its consumer group, whose pulls it serves)
// from the client's 30 s heartbeat: after a broker restart work stopped
// for about 25 s. The reconnector refreshes routes and heartbeats at once
// when
//
//   - a send failed (kick): the route is fetched again, so with several
//     brokers a broker that is gone leaves the route and sends go to the
//     others;
//
//   - a broker of the client's topics that did not accept connections
//     accepts them again: it watches each one with a TCP connect per
//     interval. The topics are those it was built with and those added
//     with watch (a Publisher adds every topic it sends to). A broker
//     counts as gone when its port refuses the connect (nothing listens
//     there: the process died), or when two looks in a row got no answer
//     within probeTimeout (a host or a network that is down). A single
//     look without an answer is more often the watcher's own process
//     not running for that long, on a machine short of cores, than the
//     broker's absence: taken as a death and a return, it would re-create
//     the consumer's pulls for nothing;
//
//   - a broker that the name server's routes lacked at the watcher's last
//     look (every namesEvery; after 1 s, doubling, while a look finds a
//     topic without a route) appears in them: it was down when the
//     watcher started, or died before the watcher first looked, so its
//     death was never seen. It counts as a return, gone since that look;
//     or
//
//   - the name server routes a broker's master at another address than
//     the client does (when the reconnector can ask it: masters is set):
//     the group failed over, by an operator or by RocketMQ 5's
//     controller. The client would keep the old address until its 30 s
//     refresh, sending nothing to the group, or only to a master that
//     no longer answers. It counts as a return, gone since it was seen:
//     every pull sent so far went to the old address. While a broker does not accept connections the names are
//     looked up every minGap, so that a failover after a crash is found
//     within about a second of the name server's learning of it. A look
//     at the masters takes at most 2 s, whatever the name servers do.
//
// A broker accepts connections some seconds before it has registered with
// the name server and can take a heartbeat, so a return is followed by
// followUps more refreshes, one per minGap. Refreshes run in the
// reconnector's own goroutine, at most one per minGap. After the refresh
// that a return triggers, and after each follow-up, it calls returned
// (when set): a Publisher passes that on to the relays waiting for the
// broker ([txmsg.BrokerReturnNotifier]).
//
// Before the refresh that follows a broker's return it calls stuck (when
// set) with each returned broker's name and the time it was first seen
// unreachable: a consumer then has the refresh's rebalance re-create its
// queues of that broker whose pull was sent before then, which the client
// would otherwise wait out for 30 s (clientinternals.ExpirePulls for a push
// consumer, clientinternals.RequeueStuck for a pull consumer).
type reconnector struct {
	log      *slog.Logger
	prober   clientinternals.RouteProber
	refresh  clientinternals.Refresher
	topics   []string
	returned func()
	stuck    func(map[string]time.Time)
	// masters, when set, asks the name servers for a topic's route:
	// each broker's master address by broker name.
	masters func(ctx context.Context, topic string) (map[string]string, error)

	interval, minGap, namesEvery time.Duration
	followUps                    int
	// probeTimeout bounds one connect of a broker; probe makes it.
	probeTimeout time.Duration
	probe        func(addr string, timeout time.Duration) probeResult

	// added holds the topics given to watch; newTopic asks for a route
	// look-up at the next tick.
	added    sync.Map // topic → struct{}
	newTopic atomic.Bool

	kickCh chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

const (
	reconnectInterval = 500 * time.Millisecond
	reconnectMinGap   = time.Second
	reconnectNames    = 5 * time.Second
	// movedMastersTimeout bounds one look at the name servers' masters.
	movedMastersTimeout = 2 * time.Second
	// silentLooks is how many looks in a row without an answer make a
	// broker gone (a refused connect makes it gone at once).
	silentLooks = 2
	// reconnectFollowUps covers a broker's start-up after its port opens
	// (5 to 15 s on the test machine).
	reconnectFollowUps = 15
)

// newReconnector returns nil (a no-op) when the client's internals cannot
// be reached: the client then recovers on its own schedule.
func newReconnector(log *slog.Logger, topics []string, prober clientinternals.RouteProber, refresh clientinternals.Refresher) *reconnector {
	if prober == nil || refresh == nil {
		return nil
	}
	return &reconnector{
		log: log, prober: prober, refresh: refresh, topics: topics,
		interval: reconnectInterval, minGap: reconnectMinGap, namesEvery: reconnectNames, followUps: reconnectFollowUps,
		probeTimeout: reconnectInterval, probe: dialProbe,
		kickCh: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// askingMasters has r ask the name servers of c for the masters of its
// topics' brokers at each look, to find a failover. It returns r.
func (r *reconnector) askingMasters(c *Conn) *reconnector {
	if r != nil {
		r.masters = c.topicMasters
	}
	return r
}

func (r *reconnector) start() {
	if r == nil {
		return
	}
	go r.run()
}

// kick asks for a refresh after a failed send. It never blocks.
func (r *reconnector) kick() {
	if r == nil {
		return
	}
	select {
	case r.kickCh <- struct{}{}:
	default:
	}
}

// watch adds topic (as the broker names it) to the topics whose brokers
// are watched. It never blocks and is cheap for a topic already watched.
func (r *reconnector) watch(topic string) {
	if r == nil {
		return
	}
	if _, seen := r.added.Load(topic); seen {
		return
	}
	if _, seen := r.added.LoadOrStore(topic, struct{}{}); !seen {
		r.newTopic.Store(true)
	}
}

// watched returns the topics whose brokers are watched.
func (r *reconnector) watched() []string {
	topics := append([]string(nil), r.topics...)
	r.added.Range(func(k, _ any) bool {
		topics = append(topics, k.(string))
		return true
	})
	return topics
}

// close stops the watcher and waits for a refresh in progress.
func (r *reconnector) close() {
	if r == nil {
		return
	}
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *reconnector) run() {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	brokers := map[string]bool{}   // broker name → unreachable at the last look
	addrs := map[string]string{}   // broker name → master address, looked up with the names
	gone := map[string]time.Time{} // broker name → first seen unreachable, while it is
	back := map[string]time.Time{} // returned brokers not yet passed to stuck → gone
	// appeared holds the brokers whose address a look-up of the names
	// found for the first time, after the watcher's first look: each with
	// the time of the look before, when it was missing or unknown.
	appeared := map[string]time.Time{}
	// namesGap is when the next look is due: namesEvery after a look that
	// found a route for every topic and an address for every broker;
	// otherwise minGap, doubling with each such look up to namesEvery, so
	// that a broker coming back is found within seconds while a topic
	// that does not exist costs no more than a look per namesEvery.
	namesGap := r.namesEvery
	backingOff := false // namesGap is backing off from minGap
	// moved holds, per broker name, the master address the name server
	// routed when the watcher last saw it differ from the client's.
	moved := map[string]string{}
	silent := map[string]int{} // broker name → looks in a row without an answer
	var lastNames, prevNames, lastRefresh time.Time
	pending := false
	more := 0          // follow-up refreshes still due after a broker's return
	returning := false // the pending refresh follows a broker's return
	for {
		select {
		case <-r.stop:
			return
		case <-r.kickCh:
			pending = true
		case <-t.C:
		}
		due := time.Since(lastNames) >= namesGap || (len(gone) > 0 && r.masters != nil && time.Since(lastNames) >= r.minGap)
		if r.newTopic.Swap(false) || due {
			prevNames, lastNames = lastNames, time.Now()
			incomplete := false
			// Names only accumulate: a broker that is down leaves the
			// name server's routes, and it is its return that matters.
			for _, topic := range r.watched() {
				mqs, err := r.prober.FetchSubscribeMessageQueues(topic)
				if err != nil || len(mqs) == 0 {
					incomplete = true
					continue
				}
				for _, mq := range mqs {
					if _, ok := brokers[mq.BrokerName]; !ok {
						brokers[mq.BrokerName] = false
					}
				}
			}
			// Looked up here, not on every tick: the pinned client reads
			// its broker table without the lock its own cleanup of
			// offline brokers takes.
			for name := range brokers {
				if addr := r.prober.FindBrokerAddrByName(name); addr != "" {
					if _, known := addrs[name]; !known && !prevNames.IsZero() {
						// Missing or unknown at the last look: a broker
						// that died just before the watcher first looked,
						// or was down when it started. The client may
						// have pulls on a connection its death closed, as
						// after a return that the watcher saw.
						appeared[name] = prevNames
					}
					addrs[name] = addr
				} else if _, known := addrs[name]; !known {
					incomplete = true
				}
			}
			for name, addr := range r.movedMasters() {
				client := r.prober.FindBrokerAddrByName(name)
				if addr == client {
					delete(moved, name)
					continue
				}
				if moved[name] != addr {
					moved[name] = addr
					r.log.Info("the name server routes the broker's master at another address than the client (a failover); refreshing routes and heartbeat now",
						"broker", name, "addr", addr, "client_addr", client)
				}
				pending, returning = true, true
				more = r.followUps
				// Every pull the client sent so far went to the old
				// address: one in flight there waits out its 30 s (a
				// frozen master still takes connections, so the probes
				// may never have found it gone). Pulls begun before now
				// are re-created.
				back[name] = time.Now()
				// Watched at the new address from now on: its being
				// reachable is no second return.
				addrs[name], brokers[name] = addr, false
				delete(gone, name)
			}
			switch {
			case !incomplete:
				namesGap, backingOff = r.namesEvery, false
			case !backingOff:
				namesGap, backingOff = r.minGap, true
			default:
				namesGap = min(2*namesGap, r.namesEvery)
			}
		}
		for name, wasDown := range brokers {
			addr := addrs[name]
			if addr == "" {
				continue
			}
			probed := time.Now()
			res := r.probe(addr, r.probeTimeout)
			if res == probeSilent {
				silent[name]++
			} else {
				delete(silent, name)
			}
			if res == probeSilent && !wasDown && silent[name] < silentLooks {
				continue // not yet gone: decided at the next look
			}
			up := res == probeUp
			since, isNew := appeared[name]
			delete(appeared, name)
			brokers[name] = !up
			if !up {
				if _, ok := gone[name]; !ok {
					gone[name] = probed
					if isNew {
						gone[name] = since
					}
				}
			}
			if up && (wasDown || isNew) {
				if isNew {
					r.log.Info("broker found in the routes after it was missing at the last look; refreshing routes and heartbeat now", "broker", name, "addr", addr)
					gone[name] = since
				} else {
					r.log.Info("broker reachable again; refreshing routes and heartbeat now", "broker", name, "addr", addr)
				}
				pending, returning = true, true
				more = r.followUps
				if since, ok := gone[name]; ok {
					back[name] = since
				}
			}
			if up {
				delete(gone, name)
			}
		}
		if !pending && more > 0 && time.Since(lastRefresh) >= r.minGap {
			pending, returning = true, true
			more--
		}
		if pending && time.Since(lastRefresh) >= r.minGap {
			pending = false
			lastRefresh = time.Now()
			if len(back) > 0 && r.stuck != nil {
				r.stuck(back)
				back = map[string]time.Time{}
			}
			r.refresh()
			if returning && r.returned != nil {
				r.returned()
			}
			returning = false
		}
	}
}

// movedMasters asks the name servers (when masters is set) for the
// watched topics' routes and returns the master address each routes per
// broker name; nil when it cannot ask or none answers.
func (r *reconnector) movedMasters() map[string]string {
	if r.masters == nil {
		return nil
	}
	// Bounded as a whole: name servers that do not answer must not hold
	// up the watcher's probes of the brokers.
	ctx, cancel := context.WithTimeout(context.Background(), movedMastersTimeout)
	defer cancel()
	out := map[string]string{}
	for _, topic := range r.watched() {
		m, err := r.masters(ctx, topic)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			continue
		}
		for name, addr := range m {
			if addr != "" {
				out[name] = addr
			}
		}
	}
	return out
}

// probeResult is what one connect to a broker found.
type probeResult int

const (
	probeUp      probeResult = iota // the connect succeeded
	probeRefused                    // refused: nothing listens at the address
	probeSilent                     // no answer in time, or another error
)

// dialProbe connects to addr over TCP and closes the connection.
func dialProbe(addr string, timeout time.Duration) probeResult {
	c, err := net.DialTimeout("tcp", addr, timeout)
	switch {
	case err == nil:
		_ = c.Close()
		return probeUp
	case errors.Is(err, syscall.ECONNREFUSED):
		return probeRefused
	default:
		return probeSilent
	}
}

// returnSignal passes a broker's return on to its subscribers
// ([txmsg.BrokerReturnNotifier]). The zero value is ready to use.
type returnSignal struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// subscribe returns a channel buffered by one that receives a value at
// each fire, and the function that ends the subscription.
func (s *returnSignal) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs == nil {
		s.subs = map[chan struct{}]struct{}{}
	}
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.subs, ch)
			s.mu.Unlock()
		})
	}
}

// fire signals every subscriber without blocking: a signal still pending
// absorbs the new one.
func (s *returnSignal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
