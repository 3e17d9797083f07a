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

// Member is one row of the relay table: a relay of the outbox table and
// when it last ran a lease round. Each relay writes its row every lease
// round and deletes it when Run returns; relays count as live the rows
// seen within the lease TTL, which sets everyone's fair share of the
// buckets. Relay names are VARBINARY, as in [Lease].
type Member struct {
	// Name is the relay's name (RelayConfig.Name).
	Name string `gorm:"type:varbinary(255);size:255;primaryKey;not null"`
	// SeenAt is when the relay last ran a lease round, by the database's
	// clock (UTC_TIMESTAMP).
	SeenAt time.Time `gorm:"precision:6;not null"`
}
