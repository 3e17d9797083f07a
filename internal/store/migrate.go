package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// TableOptions are the options txmsg creates its tables with on MySQL and
// MariaDB, the same as its .sql files: InnoDB and utf8mb4, whatever the
// server's or the database's default character set.
const TableOptions = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"

// Identifier columns (IDs, consumer groups, topics, tags, message keys,
// sharding keys, relay names) are declared in the models as VARBINARY of
// the length in bytes that txmsg allows, so that the database compares them
// byte for byte: with the server's default collation (utf8mb4_general_ci
// on MariaDB, utf8mb4_0900_ai_ci on MySQL 8) "Order-1" and "order-1" would
// be one key. VARBINARY rather than a _bin collation because it is exact
// on every server and version (utf8mb4_bin and ascii_bin are PAD SPACE:
// "a" equals "a "), it stores the bytes the application sent whatever the
// connection's character set, and it keeps index entries at one byte per
// byte (varbinary(255) takes 255 bytes in an index, varchar(255) in utf8mb4
// up to 1,020). txmsg checks lengths in bytes before it writes.

// Migrate creates table from model with [TableOptions], or brings an
// existing table up to date: it first converts, in one ALTER TABLE, every
// column the model declares VARBINARY that the database still holds as
// text (tables created before identifier columns were binary, or by hand),
// then lets gorm's AutoMigrate add what is missing. It returns the columns
// it converted; a second call converts none. It refuses, before altering
// anything, when a value would not fit the binary column, since a server
// outside strict mode would cut it.
//
// On dialects other than MySQL it only runs AutoMigrate.
func Migrate(ctx context.Context, db *gorm.DB, table string, model any) ([]string, error) {
	db = db.WithContext(ctx)
	if db.Dialector.Name() != "mysql" {
		return nil, db.Table(table).AutoMigrate(model)
	}
	converted, err := convertBinary(db, table, model)
	if err != nil {
		return nil, err
	}
	if err := db.Table(table).Set("gorm:table_options", TableOptions).AutoMigrate(model); err != nil {
		return converted, err
	}
	return converted, nil
}

// binaryColumn is a model field stored as VARBINARY.
type binaryColumn struct {
	name   string
	size   int    // bytes
	modify string // the column's definition for ALTER TABLE ... MODIFY
}

// binaryColumns lists model's VARBINARY fields with their definitions as
// gorm creates them.
func binaryColumns(db *gorm.DB, model any) ([]binaryColumn, error) {
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(model); err != nil {
		return nil, fmt.Errorf("parse model %T: %w", model, err)
	}
	var cols []binaryColumn
	for _, f := range stmt.Schema.Fields {
		if f.DBName == "" || !strings.HasPrefix(strings.ToLower(string(f.DataType)), "varbinary(") {
			continue
		}
		var size int
		if _, err := fmt.Sscanf(strings.ToLower(string(f.DataType)), "varbinary(%d)", &size); err != nil || size <= 0 {
			return nil, fmt.Errorf("model %T: field %s: cannot read the size of %q", model, f.Name, f.DataType)
		}
		cols = append(cols, binaryColumn{name: f.DBName, size: size, modify: modifyClause(db, f)})
	}
	return cols, nil
}

func modifyClause(db *gorm.DB, f *schema.Field) string {
	def := db.Migrator().FullDataTypeOf(f).SQL
	if f.PrimaryKey && !strings.Contains(strings.ToUpper(def), "NOT NULL") {
		def += " NOT NULL"
	}
	return "MODIFY " + quote(f.DBName) + " " + def
}

func quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// convertBinary converts the model's VARBINARY columns that table holds as
// another type. A missing table or column is left to AutoMigrate.
func convertBinary(db *gorm.DB, table string, model any) ([]string, error) {
	cols, err := binaryColumns(db, model)
	if err != nil || len(cols) == 0 {
		return nil, err
	}
	var existing []struct {
		Name string `gorm:"column:name"`
		Type string `gorm:"column:type"`
	}
	err = db.Raw(`SELECT column_name AS name, data_type AS type FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&existing).Error
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	types := map[string]string{}
	for _, c := range existing {
		types[strings.ToLower(c.Name)] = strings.ToLower(c.Type)
	}
	var todo []binaryColumn
	for _, c := range cols {
		if t, ok := types[strings.ToLower(c.name)]; ok && t != "varbinary" {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	if err := checkFits(db, table, todo); err != nil {
		return nil, err
	}
	clauses := make([]string, len(todo))
	names := make([]string, len(todo))
	for i, c := range todo {
		clauses[i] = c.modify
		names[i] = c.name
	}
	if err := db.Exec("ALTER TABLE " + quote(table) + " " + strings.Join(clauses, ", ")).Error; err != nil {
		return nil, fmt.Errorf("convert %s.%s to binary: %w", table, strings.Join(names, ", "), err)
	}
	return names, nil
}

// checkFits fails when a value of one of cols takes more bytes than its
// binary column holds (a varchar(255) in utf8mb4 holds 255 characters, up
// to 1,020 bytes).
func checkFits(db *gorm.DB, table string, cols []binaryColumn) error {
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = fmt.Sprintf("COALESCE(SUM(OCTET_LENGTH(%s) > %d), 0)", quote(c.name), c.size)
	}
	var counts []int64
	rows, err := db.Raw("SELECT " + strings.Join(exprs, ", ") + " FROM " + quote(table)).Rows()
	if err != nil {
		return fmt.Errorf("check the lengths in %s: %w", table, err)
	}
	defer func() { _ = rows.Close() }()
	counts = make([]int64, len(cols))
	dest := make([]any, len(cols))
	for i := range counts {
		dest[i] = &counts[i]
	}
	if rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("check the lengths in %s: %w", table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check the lengths in %s: %w", table, err)
	}
	var bad []string
	for i, n := range counts {
		if n > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d rows longer than %d bytes", cols[i].name, n, cols[i].size))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: cannot convert %s to binary columns without cutting values (%s); nothing was changed",
			ErrValueTooLong, table, strings.Join(bad, "; "))
	}
	return nil
}

// ErrValueTooLong means an existing value does not fit the binary column
// Migrate would convert its column to.
var ErrValueTooLong = errors.New("store: value too long")
