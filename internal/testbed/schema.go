package testbed

import (
	"os"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// ExecSQLFile runs the statements of a .sql file (separated by ";" at line
// ends; "--" comments allowed) on db.
func ExecSQLFile(t testing.TB, db *gorm.DB, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var stmt strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || trimmed == "" {
			continue
		}
		stmt.WriteString(line)
		stmt.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			if err := db.Exec(stmt.String()).Error; err != nil {
				t.Fatalf("%s: %v\n%s", path, err, stmt.String())
			}
			stmt.Reset()
		}
	}
	if strings.TrimSpace(stmt.String()) != "" {
		t.Fatalf("%s: statement without a closing ';':\n%s", path, stmt.String())
	}
}

// TableShape is what two schemas must agree on: the table's collation,
// columns with their types, nullability and collations, in order, and
// indexes with their columns and uniqueness.
type TableShape struct {
	Collation string
	Columns   []string
	Indexes   []string
}

// Shape reads table's shape from information_schema of db's current
// database.
func Shape(t testing.TB, db *gorm.DB, table string) TableShape {
	t.Helper()
	var s TableShape
	err := db.Raw(`SELECT table_collation FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&s.Collation).Error
	if err != nil {
		t.Fatalf("collation of %s: %v", table, err)
	}
	err = db.Raw(`SELECT CONCAT(column_name, ' ', column_type, ' ', is_nullable, ' ', extra, ' ', IFNULL(collation_name, '-'))
		FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?
		ORDER BY ordinal_position`, table).Scan(&s.Columns).Error
	if err != nil {
		t.Fatalf("columns of %s: %v", table, err)
	}
	err = db.Raw(`SELECT CONCAT(index_name, ' ', non_unique, ' ', GROUP_CONCAT(column_name ORDER BY seq_in_index))
		FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ?
		GROUP BY index_name, non_unique ORDER BY index_name`, table).Scan(&s.Indexes).Error
	if err != nil {
		t.Fatalf("indexes of %s: %v", table, err)
	}
	if len(s.Columns) == 0 {
		t.Fatalf("table %s does not exist", table)
	}
	return s
}
