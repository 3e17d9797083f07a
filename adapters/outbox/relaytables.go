package outbox

import "time"

// leaseSuffix names the lease table after the outbox table, and
// relaySuffix the relay table. They have the same length, which
// validTable relies on.
const (
	leaseSuffix = "_lease"
	relaySuffix = "_relay"
)

// Lease is one row of the lease table of the relays: which relay owns
// a bucket, until when, and which relay asked to take it over. Relay names
// are VARBINARY: "Relay-A" and "relay-a" are two relays.
type Lease struct {
	// Bucket is the bucket number, 0 to Buckets-1.
	Bucket int `gorm:"size:32;primaryKey;autoIncrement:false"`
	// Owner is the name of the relay holding the bucket; empty when free.
	Owner string `gorm:"type:varbinary(255);size:255;not null;default:''"`
	// ExpiresAt is when the lease lapses unless renewed (the database's
	// clock).
	ExpiresAt time.Time `gorm:"precision:6;not null"`
	// WantedBy names a relay that asked the owner to hand the bucket over.
	WantedBy string `gorm:"type:varbinary(255);size:255;not null;default:''"`
	// WantedAt is when WantedBy last renewed its ask. An ask older than
	// the lease TTL is stale: its relay is presumed dead and is ignored.
	WantedAt time.Time `gorm:"precision:6;not null;default:'1970-01-01 00:00:01'"`
}

// Member is one row of the relay table: a relay of the outbox table,
// when it last ran a lease round, and its health as of that round. Each
// relay writes its row every lease round and deletes it when Run returns
// (or when it hands its buckets over, see [RelayConfig.HandOverAfter]);
// relays count as live the rows seen within the lease TTL, which sets
// everyone's fair share of the buckets. Relay names are VARBINARY, as in
// [Lease]. [Outbox.Relays] reads the table with each relay's state.
type Member struct {
	// Name is the relay's name (RelayConfig.Name).
	Name string `gorm:"type:varbinary(255);size:255;primaryKey;not null"`
	// SeenAt is when the relay last ran a lease round, by the database's
	// clock (UTC_TIMESTAMP).
	SeenAt time.Time `gorm:"precision:6;not null"`
	// LeaseTTLMicros is the relay's RelayConfig.LeaseTTL in microseconds;
	// 0 in rows written by relays of earlier releases.
	LeaseTTLMicros int64 `gorm:"column:lease_ttl_us;not null;default:0"`
	// UnavailableSince, when set, is since when the relay's publishes fail
	// because the broker or the route is unavailable (as Relay.Health
	// reports it), by the database's clock; nil while they succeed.
	UnavailableSince *time.Time `gorm:"precision:6"`
	// LastError is the broker's error of the relay's last failed publish
	// while UnavailableSince is set, cut to 1024 bytes; empty otherwise.
	LastError string `gorm:"size:1024;not null;default:''"`
}

// maxMemberError bounds Member.LastError.
const maxMemberError = 1024
