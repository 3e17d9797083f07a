package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/internal/testbed"
)

// TestAuditCatchesBrokenInvariants feeds the audit tables in which an
// event was lost and an effect applied twice: the report must say so.
func TestAuditCatchesBrokenInvariants(t *testing.T) {
	t.Parallel()
	db := testbed.DB(t)
	for _, stmt := range []string{
		"CREATE TABLE orders (id VARCHAR(36) PRIMARY KEY, status VARCHAR(16) NOT NULL)",
		// No unique key on order_id here, so a second deduction can exist.
		"CREATE TABLE deductions (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_id VARCHAR(36) NOT NULL, sku VARCHAR(64) NOT NULL, quantity INT NOT NULL)",
		"CREATE TABLE inventory (sku VARCHAR(64) PRIMARY KEY, stock INT NOT NULL)",
		"CREATE TABLE txmsg_inbox (id BIGINT AUTO_INCREMENT PRIMARY KEY)",
		"INSERT INTO orders VALUES ('o1', 'confirmed'), ('o2', 'pending'), ('o3', 'rejected')",
		"INSERT INTO deductions (order_id, sku, quantity) VALUES ('o1', 'fig', 2), ('o1', 'fig', 2)",
		"INSERT INTO inventory VALUES ('fig', 8)",
		"INSERT INTO txmsg_inbox () VALUES (), ()",
	} {
		require.NoError(t, db.Exec(stmt).Error, stmt)
	}
	run := &Run{InitialStock: map[string]int{"fig": 10}, Sent: 3, Created: []string{"o1", "o2", "o3"}, OverStock: []string{"o3"}}

	rep, err := Audit(t.Context(), db, run, 300*time.Millisecond, nil)
	require.NoError(t, err)
	require.False(t, rep.Consistent())
	require.EqualValues(t, 1, rep.EventsLost, "o2 is still pending")
	require.EqualValues(t, 2, rep.DuplicateEffects, "o1 deducted twice, and the stock is 8, not 10 - 4")
	require.Len(t, rep.Problems, 3)
}
