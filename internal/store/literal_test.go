package store

import (
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestLiteralsRoundTrip writes awkward values as literals and as driver
// arguments into the same table and reads both back: they must be equal,
// byte for byte and instant for instant, in a connection time zone that is
// not UTC.
func TestLiteralsRoundTrip(t *testing.T) {
	_, dsn := testbed.DBWithDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.Loc, err = time.LoadLocation("Asia/Kolkata")
	require.NoError(t, err)
	cfg.ParseTime = true
	db, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	})
	lit, ok := LiteralsFor(db)
	require.True(t, ok, "a DSN-opened MySQL handle takes literals")

	require.NoError(t, db.Exec("CREATE TABLE lit (id int NOT NULL PRIMARY KEY, b varbinary(255) NOT NULL, "+
		"blob_ longblob NOT NULL, txt text NOT NULL, at datetime(6) NOT NULL)").Error)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	id := "quote' \"double\" back\\slash ? @name -- ; ` é"
	txt := `{"k":"v'\\\"?","ü":"日本"}`
	at := time.Date(2026, 3, 29, 1, 30, 15, 123456000, time.UTC)

	q := []byte("INSERT INTO lit VALUES (1,")
	q = lit.String(q, id)
	q = append(q, ',')
	q = lit.Bytes(q, all)
	q = append(q, ',')
	q = lit.String(q, txt)
	q = append(q, ',')
	q = lit.Time(q, at)
	q = append(q, ')')
	require.NoError(t, db.Exec(string(q)).Error)
	require.NoError(t, db.Exec("INSERT INTO lit VALUES (2, ?, ?, ?, ?)", id, all, txt, at).Error)
	// Empty values, which X'' must write as empty.
	q = []byte("INSERT INTO lit VALUES (3,")
	q = lit.String(q, "")
	q = append(q, ',')
	q = lit.Bytes(q, nil)
	q = append(q, ',')
	q = lit.String(q, "")
	q = append(q, ',')
	q = lit.Time(q, at)
	q = append(q, ')')
	require.NoError(t, db.Exec(string(q)).Error)

	type row struct {
		ID   int
		B    []byte
		Blob []byte `gorm:"column:blob_"`
		Txt  string
		At   time.Time
	}
	var rows []row
	require.NoError(t, db.Raw("SELECT id, b, blob_, txt, at FROM lit ORDER BY id").Scan(&rows).Error)
	require.Len(t, rows, 3)
	for _, r := range rows[:2] {
		require.Equal(t, []byte(id), r.B, "row %d", r.ID)
		require.Equal(t, all, r.Blob, "row %d", r.ID)
		require.Equal(t, txt, r.Txt, "row %d", r.ID)
		require.True(t, at.Equal(r.At), "row %d: %s, want %s", r.ID, r.At, at)
	}
	require.Empty(t, rows[2].B)
	require.Empty(t, rows[2].Blob)
	require.Empty(t, rows[2].Txt)
}

// TestLiteralsFor: only a MySQL handle with a known time zone and without
// interpolateParams (which already sends one query) takes literals.
func TestLiteralsFor(t *testing.T) {
	_, dsn := testbed.DBWithDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.InterpolateParams = true
	db, err := testbed.Open(cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			_ = s.Close()
		}
	})
	_, ok := LiteralsFor(db)
	require.False(t, ok)
	_, ok = LiteralsFor(nil)
	require.False(t, ok)
}

// TestLiteralsForPreparedHandles: a handle or transaction that prepares
// and caches its statements (gorm's PrepareStmt, in its Config or its
// session) takes arguments; the plain handle takes literals.
func TestLiteralsForPreparedHandles(t *testing.T) {
	db := testbed.DB(t)
	_, ok := LiteralsFor(db)
	require.True(t, ok, "a plain handle from a DSN takes literals")
	prepared := db.Session(&gorm.Session{PrepareStmt: true})
	_, ok = LiteralsFor(prepared)
	require.False(t, ok, "session with PrepareStmt")
	require.NoError(t, prepared.Transaction(func(tx *gorm.DB) error {
		_, ok := LiteralsFor(tx)
		require.False(t, ok, "transaction of a PrepareStmt session")
		return nil
	}))
}
