package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// MaxListLimit is the most rows [Outbox.List] returns at once.
const MaxListLimit = 1000

// DefaultListLimit is the page size of [Outbox.List] for a Limit of 0.
const DefaultListLimit = 100

// ListFilter selects outbox rows for [Outbox.List]. The zero value lists
// every row, oldest first, [DefaultListLimit] at a time.
type ListFilter struct {
	// Status, when set, keeps rows of that status only: [StatusParked]
	// lists the rows that wait for an operator.
	Status Status
	// IDs, when set, keeps the rows with these txmsg IDs only; IDs with no
	// row are left out. At most [MaxListLimit] IDs.
	IDs []string
	// Topic, when set, keeps rows of that topic only (exact match).
	Topic string
	// Key, when set, keeps rows whose txmsg ID, sharding key or one of
	// whose keys equals it.
	Key string
	// OlderThan, when positive, keeps rows created more than this long ago.
	OlderThan time.Duration
	// AfterID, when positive, starts after the row with this primary key:
	// the ID of the last row of the previous page.
	AfterID int64
	// Limit is the page size: 0 means [DefaultListLimit], or len(IDs)
	// when IDs are more; at most [MaxListLimit].
	Limit int
}

// ErrBadFilter means a [ListFilter] asks for something List cannot do.
var ErrBadFilter = errors.New("outbox: bad filter")

// List returns the rows matching f in primary-key order (oldest first).
// A filter by key reads the keys column without an index; bound the
// call's context.
func (o *Outbox) List(ctx context.Context, f ListFilter) ([]Row, error) {
	switch {
	case f.Limit < 0 || f.Limit > MaxListLimit:
		return nil, fmt.Errorf("%w: limit %d is not between 0 and %d", ErrBadFilter, f.Limit, MaxListLimit)
	case f.OlderThan < 0:
		return nil, fmt.Errorf("%w: age %v is negative", ErrBadFilter, f.OlderThan)
	case len(f.IDs) > MaxListLimit:
		return nil, fmt.Errorf("%w: %d IDs are more than %d; list them in parts", ErrBadFilter, len(f.IDs), MaxListLimit)
	case f.Status != "" && f.Status != StatusPending && f.Status != StatusSent && f.Status != StatusParked:
		return nil, fmt.Errorf("%w: status %q is not %s, %s or %s (parked)", ErrBadFilter, f.Status, StatusPending, StatusSent, StatusParked)
	}
	if f.Limit == 0 {
		f.Limit = max(DefaultListLimit, len(f.IDs))
	}
	q := o.q.WithContext(ctx).Table(o.cfg.Table)
	if f.Status != "" {
		q = q.Where(clause.Eq{Column: clause.Column{Name: "status"}, Value: f.Status})
	}
	if len(f.IDs) > 0 {
		q = q.Where("msg_id IN ?", f.IDs)
	}
	if f.Topic != "" {
		q = q.Where(clause.Eq{Column: clause.Column{Name: "topic"}, Value: f.Topic})
	}
	if f.Key != "" {
		q = q.Where(keyMatch("keys", f.Key, "msg_id", "sharding_key"))
	}
	if f.OlderThan > 0 {
		q = q.Where("created_at < DATE_SUB("+dbClock+", INTERVAL ? MICROSECOND)", f.OlderThan.Microseconds())
	}
	if f.AfterID > 0 {
		q = q.Where(clause.Gt{Column: clause.Column{Name: "id"}, Value: f.AfterID})
	}
	var rows []Row
	if err := q.Order("id").Limit(f.Limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("outbox: list %s: %w", o.cfg.Table, err)
	}
	return rows, nil
}

// keyMatch matches rows where one of the space-separated words of column
// keys equals key, or one of the columns exact equals it.
func keyMatch(keys, key string, exact ...string) clause.Expression {
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(key)
	col := clause.Column{Name: keys}
	or := []clause.Expression{
		clause.Eq{Column: col, Value: key},
		clause.Like{Column: col, Value: esc + " %"},
		clause.Like{Column: col, Value: "% " + esc},
		clause.Like{Column: col, Value: "% " + esc + " %"},
	}
	for _, c := range exact {
		or = append(or, clause.Eq{Column: clause.Column{Name: c}, Value: key})
	}
	return clause.Or(or...)
}

// ErrNoRow means no outbox row has the txmsg ID asked for.
var ErrNoRow = errors.New("outbox: no such row")

// Get returns the row with txmsg ID id, or an error wrapping [ErrNoRow].
func (o *Outbox) Get(ctx context.Context, id string) (*Row, error) {
	var row Row
	err := o.q.WithContext(ctx).Table(o.cfg.Table).
		Where(clause.Eq{Column: clause.Column{Name: "msg_id"}, Value: id}).Take(&row).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return nil, fmt.Errorf("%w: %q in %s", ErrNoRow, id, o.cfg.Table)
	case err != nil:
		return nil, fmt.Errorf("outbox: read %s: %w", o.cfg.Table, err)
	}
	return &row, nil
}

// Leases returns the lease rows of the relays, by bucket. It returns
// none when no relay has run on the table (no lease table).
func (o *Outbox) Leases(ctx context.Context) ([]Lease, error) {
	table := o.cfg.Table + leaseSuffix
	if !o.q.WithContext(ctx).Migrator().HasTable(table) {
		return nil, nil
	}
	var out []Lease
	if err := o.q.WithContext(ctx).Table(table).Order("bucket").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("outbox: read leases of %s: %w", table, err)
	}
	return out, nil
}

// Members returns the rows of the relay table, by name: the relays that
// registered and when each last ran a lease round. A relay counts as live
// while its row is younger than the lease TTL. It returns none when no
// relay has registered on the table (no relay table).
func (o *Outbox) Members(ctx context.Context) ([]Member, error) {
	table := o.cfg.Table + relaySuffix
	if !o.q.WithContext(ctx).Migrator().HasTable(table) {
		return nil, nil
	}
	var out []Member
	if err := o.q.WithContext(ctx).Table(table).Order("name").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("outbox: read relays of %s: %w", table, err)
	}
	return out, nil
}

// RelayState is what [Outbox.Relays] makes of a relay's row.
type RelayState string

// The states of a relay.
const (
	// RelayLive: the relay ran a lease round within its LeaseTTL and its
	// publishes reach the broker.
	RelayLive RelayState = "live"
	// RelayStale: the relay ran no lease round within its LeaseTTL (by
	// the database's clock): the other relays no longer count it, and its
	// buckets go to them when its leases expire. It crashed, lost the
	// database, or is stuck.
	RelayStale RelayState = "stale"
	// RelayFailing: the relay runs its lease rounds but its publishes fail
	// because the broker or the route is unavailable to it: the rows of
	// its buckets wait. Check that host's network path to the name server
	// and brokers; RelayStatus.LastError says what the broker client saw.
	RelayFailing RelayState = "failing"
)

// RelayStatus is one relay of the table as [Outbox.Relays] sees it.
type RelayStatus struct {
	// Name is the relay's name (RelayConfig.Name).
	Name string
	// State is [RelayStale] when the relay ran no lease round within its
	// LeaseTTL, else [RelayFailing] when UnavailableSince is set, else
	// [RelayLive].
	State RelayState
	// SeenAt is when the relay last ran a lease round, by the database's
	// clock, and Age how long ago that was, by the same clock.
	SeenAt time.Time
	Age    time.Duration
	// LeaseTTL is the relay's RelayConfig.LeaseTTL; [DefaultLeaseTTL] for
	// rows of relays of earlier releases, which do not write it.
	LeaseTTL time.Duration
	// Buckets are the buckets whose lease the relay holds now (unexpired
	// by the database's clock), in order.
	Buckets []int
	// UnavailableSince is since when the relay's publishes fail because
	// the broker or the route is unavailable to it (the database's clock),
	// as of its last lease round; zero while they succeed.
	UnavailableSince time.Time
	// LastError is the broker's error of the relay's last failed publish
	// while UnavailableSince is set, at most 1024 bytes; empty otherwise.
	LastError string
}

// Relays returns every relay registered in the relay table, by name,
// whichever process it runs in, with the buckets it holds and its health
// as written at its last lease round (every LeaseTTL/3). Staleness is
// judged by the database's clock against each relay's own LeaseTTL, the
// rule by which relays count one another. Unlike [Relay.Health], which
// reports the calling process's relay only, it shows a relay of another
// replica that cannot reach the broker. Relays that hand their buckets
// over for being cut off from the broker (see
// [RelayConfig.HandOverAfter]) leave the table until they rejoin, and
// lease holders of releases before the relay table are not listed (see
// [Outbox.Leases]). It returns none when no relay has registered (no
// relay table), and lists relays without health when the table lacks the
// health columns (run [Outbox.Migrate]).
func (o *Outbox) Relays(ctx context.Context) ([]RelayStatus, error) {
	table := o.cfg.Table + relaySuffix
	db := o.q.WithContext(ctx)
	if !db.Migrator().HasTable(table) {
		return nil, nil
	}
	members, err := o.Members(ctx)
	if err != nil {
		return nil, err
	}
	leases, err := o.Leases(ctx)
	if err != nil {
		return nil, err
	}
	now, err := dbNow(ctx, o.q)
	if err != nil {
		return nil, err
	}
	held := map[string][]int{}
	for _, l := range leases {
		if l.Owner != "" && l.ExpiresAt.After(now) {
			held[l.Owner] = append(held[l.Owner], l.Bucket)
		}
	}
	out := make([]RelayStatus, 0, len(members))
	for _, m := range members {
		s := RelayStatus{Name: m.Name, SeenAt: m.SeenAt, Age: max(now.Sub(m.SeenAt), 0),
			LeaseTTL: time.Duration(m.LeaseTTLMicros) * time.Microsecond, Buckets: held[m.Name], LastError: m.LastError}
		if s.LeaseTTL <= 0 {
			s.LeaseTTL = DefaultLeaseTTL
		}
		if m.UnavailableSince != nil {
			s.UnavailableSince = *m.UnavailableSince
		}
		switch {
		case !m.SeenAt.After(now.Add(-s.LeaseTTL)):
			s.State = RelayStale
		case m.UnavailableSince != nil:
			s.State = RelayFailing
		default:
			s.State = RelayLive
		}
		out = append(out, s)
	}
	return out, nil
}

// SentSince counts the rows published since t: the relays' publish rate
// over a window. Sent rows purged meanwhile are not counted.
func (o *Outbox) SentSince(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := o.q.WithContext(ctx).Table(o.cfg.Table).
		Where(clause.Eq{Column: clause.Column{Name: "status"}, Value: StatusSent}).
		Where(clause.Gte{Column: clause.Column{Name: "updated_at"}, Value: t.UTC()}).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("outbox: count sent rows of %s: %w", o.cfg.Table, err)
	}
	return n, nil
}
