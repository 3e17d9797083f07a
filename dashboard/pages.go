package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/txmsg"
)

// ---- overview ----

type overviewData struct {
	Outbox      outbox.Stats
	OutboxTable string
	OutboxErr   string
	Relays      []relayView
	FreeBuckets []int
	LeaseErr    string
	// IdleFor, when set, is how long no relay has held a bucket or run a
	// lease round, at least outboxIdleAfter, with no row pending: the
	// outbox mode is unused, and its lease rows are left from an earlier
	// run rather than a sign of trouble.
	IdleFor    time.Duration
	Barrier    map[string]int64
	BarrierErr string
	Groups     []groupView
	GroupsErr  string
	Health     []healthView
	Charts     []chartView
	// Fleet is every instance of the instance table and every relay, by
	// kind and group (see fleet.go).
	Fleet    []fleetGroup
	FleetErr string
}

type relayView struct {
	Name    string
	Buckets []int
	Expires time.Time
	Wanted  []int     // buckets other relays asked this one for
	Seen    time.Time // its last lease round (the relay table); zero when it is not there
	// State is live, stale or failing (outbox.RelayState); a lease holder
	// missing from the relay table (a relay of an earlier release) holds an
	// unexpired lease and shows live.
	State outbox.RelayState
	// Err is the relay's broker error while it is failing, and Since when
	// its publishes began to fail.
	Err   string
	Since time.Time
}

type groupView struct {
	Group                    string
	Handled, Parked, Failing int64
}

type healthView struct {
	Name string
	OK   bool
	Err  string
	Took time.Duration
}

func (d *Dashboard) overview(r *http.Request) (string, string, any, error) {
	ctx := r.Context()
	data := &overviewData{OutboxTable: d.ob.Table()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var idle time.Time // the relays' last activity
	run := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	run(func() {
		s, err := d.ob.Stats(ctx)
		mu.Lock()
		defer mu.Unlock()
		data.Outbox, data.OutboxErr = s, errText(err)
	})
	run(func() {
		leases, err := d.ob.Leases(ctx)
		var members []outbox.RelayStatus
		if err == nil {
			members, err = d.ob.Relays(ctx)
		}
		mu.Lock()
		defer mu.Unlock()
		data.LeaseErr = errText(err)
		data.Relays, data.FreeBuckets = relays(leases, members, time.Now())
		if err == nil {
			idle = lastRelayActivity(leases, members)
		}
		mu.Unlock()
		groups, ferr := d.fleetView(ctx, members)
		mu.Lock()
		data.Fleet, data.FleetErr = groups, errText(ferr)
	})
	run(func() {
		charts := d.history.charts(ctx)
		mu.Lock()
		defer mu.Unlock()
		data.Charts = charts
	})
	run(func() {
		c, err := d.chk.Counts(ctx)
		mu.Lock()
		defer mu.Unlock()
		data.Barrier, data.BarrierErr = c, errText(err)
	})
	run(func() {
		handled, parked, err := d.groupCounts(ctx)
		failing, _ := d.inbox.FailingByGroup(ctx) // the Consumers page reports its error
		mu.Lock()
		defer mu.Unlock()
		data.GroupsErr = errText(err)
		names := map[string]bool{}
		for _, m := range []map[string]int64{handled, parked, failing} {
			for g := range m {
				names[g] = true
			}
		}
		for g := range names {
			data.Groups = append(data.Groups, groupView{Group: g, Handled: handled[g], Parked: parked[g], Failing: failing[g]})
		}
		sort.Slice(data.Groups, func(i, j int) bool { return data.Groups[i].Group < data.Groups[j].Group })
	})
	data.Health = make([]healthView, len(d.cfg.Health))
	for i, h := range d.cfg.Health {
		run(func() {
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			err := safeCheck(hctx, h.Check)
			data.Health[i] = healthView{Name: h.Name, OK: err == nil, Err: errText(err), Took: time.Since(start)}
		})
	}
	wg.Wait()
	if now := time.Now(); outboxIdle(data, idle, now) {
		data.IdleFor = now.Sub(idle)
	}
	return "overview", "Overview", data, nil
}

// outboxIdleAfter is how long no relay may have held a bucket or run a
// lease round before the overview calls the outbox mode idle.
const outboxIdleAfter = 10 * time.Minute

// outboxIdle reports whether the outbox mode is unused: lease rows exist,
// none has a live owner, no relay held a bucket or ran a lease round for
// outboxIdleAfter (last is the latest of those), and no row is pending.
// A service that moved to transactional mode leaves such rows behind.
// Pending rows without a live relay are never idle: nothing publishes
// them.
func outboxIdle(data *overviewData, last, now time.Time) bool {
	if data.OutboxErr != "" || data.LeaseErr != "" || data.Outbox.Pending > 0 || len(data.FreeBuckets) == 0 {
		return false
	}
	for _, r := range data.Relays {
		if len(r.Buckets) > 0 {
			return false
		}
	}
	return !last.IsZero() && now.Sub(last) >= outboxIdleAfter
}

// lastRelayActivity is the latest lease expiry or lease round in the
// lease and relay tables; zero when they are empty.
func lastRelayActivity(leases []outbox.Lease, members []outbox.RelayStatus) time.Time {
	var last time.Time
	for _, l := range leases {
		if l.ExpiresAt.After(last) {
			last = l.ExpiresAt
		}
	}
	for _, m := range members {
		if m.SeenAt.After(last) {
			last = m.SeenAt
		}
	}
	return last
}

// safeCheck runs a health check, turning a panic into an error.
func safeCheck(ctx context.Context, check func(context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("health check panicked: %v", v)
		}
	}()
	if check == nil {
		return errors.New("no check function")
	}
	return check(ctx)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// relays groups lease rows by owner, adds each relay of the relay table
// with its last lease round and state (a relay there may hold no bucket
// yet); buckets with no live owner are free.
func relays(leases []outbox.Lease, members []outbox.RelayStatus, now time.Time) ([]relayView, []int) {
	by := map[string]*relayView{}
	for _, m := range members {
		by[m.Name] = &relayView{Name: m.Name, Seen: m.SeenAt, State: m.State, Err: m.LastError, Since: m.UnavailableSince}
	}
	var free []int
	for _, l := range leases {
		if l.Owner == "" || !l.ExpiresAt.After(now) {
			free = append(free, l.Bucket)
			continue
		}
		rv := by[l.Owner]
		if rv == nil {
			rv = &relayView{Name: l.Owner, State: outbox.RelayLive}
			by[l.Owner] = rv
		}
		if rv.Expires.IsZero() {
			rv.Expires = l.ExpiresAt
		}
		rv.Buckets = append(rv.Buckets, l.Bucket)
		if l.ExpiresAt.Before(rv.Expires) {
			rv.Expires = l.ExpiresAt
		}
		if l.WantedBy != "" {
			rv.Wanted = append(rv.Wanted, l.Bucket)
		}
	}
	out := make([]relayView, 0, len(by))
	for _, rv := range by {
		out = append(out, *rv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, free
}

// ---- outbox ----

type outboxData struct {
	Filter  outboxFilter
	Rows    []outbox.Row
	More    bool
	NextURL string
	Back    string
}

type outboxFilter struct {
	Status, Topic, Key, Age string
	Limit                   int
}

// parseLimit reads the page size: 1 to MaxPageSize, default 100.
func parseLimit(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, badRequest("limit %q is not a number.", short(40, s))
	case n < 1 || n > MaxPageSize:
		return 0, badRequest("limit must be between 1 and %d; %d is too many rows for one page.", MaxPageSize, n)
	}
	return n, nil
}

// text reads a query parameter that names something: at most maxQueryLen
// bytes.
func text(q url.Values, name string) (string, error) {
	v := strings.TrimSpace(q.Get(name))
	if len(v) > maxQueryLen {
		return "", badRequest("%s is at most %d bytes; got %d.", name, maxQueryLen, len(v))
	}
	return v, nil
}

func parseAfter(q url.Values) (int64, error) {
	s := q.Get("after")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("after %q is not a row number.", short(40, s))
	}
	return n, nil
}

func (d *Dashboard) outboxList(r *http.Request) (string, string, any, error) {
	q := r.URL.Query()
	f := outboxFilter{Status: q.Get("status")}
	var status outbox.Status
	switch f.Status {
	case "", "parked", "dead": // dead: the name of earlier releases
		f.Status, status = "parked", outbox.StatusParked
	case "pending":
		status = outbox.StatusPending
	case "sent":
		status = outbox.StatusSent
	case "all":
	default:
		return "", "", nil, badRequest("status %q is not parked, pending, sent or all.", short(40, f.Status))
	}
	var err error
	if f.Topic, err = text(q, "topic"); err != nil {
		return "", "", nil, err
	}
	if f.Key, err = text(q, "key"); err != nil {
		return "", "", nil, err
	}
	if f.Limit, err = parseLimit(q); err != nil {
		return "", "", nil, err
	}
	after, err := parseAfter(q)
	if err != nil {
		return "", "", nil, err
	}
	lf := outbox.ListFilter{Topic: f.Topic, Key: f.Key, AfterID: after, Limit: f.Limit + 1}
	lf.Status = status
	if f.Age = strings.TrimSpace(q.Get("older")); f.Age != "" {
		age, err := time.ParseDuration(f.Age)
		if err != nil || age < 0 {
			return "", "", nil, badRequest("older %q is not an age: write it like 90s, 15m or 2h.", short(40, f.Age))
		}
		lf.OlderThan = age
	}
	rows, err := d.ob.List(r.Context(), lf)
	if err != nil {
		return "", "", nil, err
	}
	data := &outboxData{Filter: f, Rows: rows, Back: r.URL.RequestURI()}
	if len(rows) > f.Limit {
		data.Rows, data.More = rows[:f.Limit], true
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Del("done")
		nq.Set("after", strconv.FormatInt(data.Rows[f.Limit-1].ID, 10))
		data.NextURL = "/outbox?" + nq.Encode()
	}
	return "outbox", "Outbox", data, nil
}

type rowData struct {
	Row        *outbox.Row
	Body       body
	Properties map[string]string
	Back       string
}

func (d *Dashboard) outboxRow(r *http.Request) (string, string, any, error) {
	row, err := d.findOutboxRow(r, "/outbox/row")
	if err != nil {
		return "", "", nil, err
	}
	return "row", "Outbox row", &rowData{Row: row, Body: showBody(row.Body), Properties: properties(row.Properties), Back: r.URL.RequestURI()}, nil
}

// outboxBody sends an outbox row's whole body as a download.
func (d *Dashboard) outboxBody(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := contextWithTimeout(r, d.cfg.QueryTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	row, err := d.findOutboxRow(r, "/outbox/row/body")
	if err != nil {
		d.fail(w, r, err)
		return
	}
	sendBody(w, row.MsgID, row.Body)
}

// findOutboxRow reads the outbox row the query's id names.
func (d *Dashboard) findOutboxRow(r *http.Request, path string) (*outbox.Row, error) {
	id, err := text(r.URL.Query(), "id")
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, badRequest("Give the row's txmsg ID: %s?id=...", path)
	}
	row, err := d.ob.Get(r.Context(), id)
	if errors.Is(err, outbox.ErrNoRow) {
		return nil, notFound("No outbox row has txmsg ID %q. It may have been sent and purged, or never written.", id)
	}
	return row, err
}

// ---- consumers ----

type consumersData struct {
	Group   string
	Key     string
	Limit   int
	Groups  []parkedGroup
	Counts  []groupView
	Replay  bool
	More    bool
	NextURL string
	Back    string
	Failing *failingView
}

type parkedGroup struct {
	Group string
	Rows  []txmsg.ParkedRow
}

func (d *Dashboard) consumerList(r *http.Request) (string, string, any, error) {
	q := r.URL.Query()
	data := &consumersData{Replay: d.cfg.Publisher != nil, Back: r.URL.RequestURI()}
	var err error
	if data.Group, err = text(q, "group"); err != nil {
		return "", "", nil, err
	}
	if data.Key, err = text(q, "key"); err != nil {
		return "", "", nil, err
	}
	if data.Limit, err = parseLimit(q); err != nil {
		return "", "", nil, err
	}
	after, err := parseAfter(q)
	if err != nil {
		return "", "", nil, err
	}
	rows, err := d.inbox.Parked(r.Context(), txmsg.ParkedFilter{Group: data.Group, Key: data.Key, AfterID: after, Limit: data.Limit + 1})
	if err != nil {
		return "", "", nil, err
	}
	if len(rows) > data.Limit {
		rows, data.More = rows[:data.Limit], true
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Del("done")
		nq.Set("after", strconv.FormatInt(rows[len(rows)-1].ID, 10))
		data.NextURL = "/consumers?" + nq.Encode()
	}
	idx := map[string]int{}
	for _, row := range rows {
		i, ok := idx[row.ConsumerGroup]
		if !ok {
			i = len(data.Groups)
			idx[row.ConsumerGroup] = i
			data.Groups = append(data.Groups, parkedGroup{Group: row.ConsumerGroup})
		}
		data.Groups[i].Rows = append(data.Groups[i].Rows, row)
	}
	sort.Slice(data.Groups, func(i, j int) bool { return data.Groups[i].Group < data.Groups[j].Group })
	handled, parked, err := d.groupCounts(r.Context())
	if err != nil {
		return "", "", nil, err
	}
	for g, n := range parked {
		data.Counts = append(data.Counts, groupView{Group: g, Parked: n, Handled: handled[g]})
	}
	sort.Slice(data.Counts, func(i, j int) bool { return data.Counts[i].Group < data.Counts[j].Group })
	if data.Failing, err = d.failingFor(r.Context(), data.Group); err != nil {
		return "", "", nil, err
	}
	data.Counts = data.Failing.withGroups(data.Counts)
	return "consumers", "Consumers", data, nil
}

type parkedData struct {
	Row        *txmsg.ParkedRow
	Body       body
	Properties map[string]string
	Replay     bool
	Back       string
}

func (d *Dashboard) consumerMessage(r *http.Request) (string, string, any, error) {
	row, err := d.findParked(r, "/consumers/message")
	if err != nil {
		return "", "", nil, err
	}
	return "parked", "Parked message", &parkedData{Row: row, Body: showBody(row.Body), Properties: properties(row.Properties),
		Replay: d.cfg.Publisher != nil, Back: r.URL.RequestURI()}, nil
}

// parkedBody sends a parked message's whole body as a download.
func (d *Dashboard) parkedBody(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := contextWithTimeout(r, d.cfg.QueryTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	row, err := d.findParked(r, "/consumers/message/body")
	if err != nil {
		d.fail(w, r, err)
		return
	}
	sendBody(w, row.ConsumerGroup+"-"+row.MsgID, row.Body)
}

// findParked reads the parked message the query's group and id name.
func (d *Dashboard) findParked(r *http.Request, path string) (*txmsg.ParkedRow, error) {
	q := r.URL.Query()
	group, err := text(q, "group")
	if err != nil {
		return nil, err
	}
	id, err := text(q, "id")
	if err != nil {
		return nil, err
	}
	if group == "" || id == "" {
		return nil, badRequest("Give the consumer group and the txmsg ID: %s?group=...&id=...", path)
	}
	row, err := d.inbox.ParkedMessage(r.Context(), group, id)
	if errors.Is(err, txmsg.ErrNotParked) {
		return nil, notFound("Group %q has no parked message with txmsg ID %q. It may have been replayed or purged.", group, id)
	}
	return row, err
}

// groupCounts counts handled and parked messages per consumer group.
func (d *Dashboard) groupCounts(ctx context.Context) (handled, parked map[string]int64, err error) {
	if handled, err = d.inbox.HandledByGroup(ctx); err != nil {
		return nil, nil, err
	}
	if parked, err = d.inbox.ParkedByGroup(ctx); err != nil {
		return nil, nil, err
	}
	return handled, parked, nil
}
