package store

import (
	"encoding/hex"
	"strconv"
	"time"

	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// Literal SQL for the hot path. With the go-sql-driver default
// (interpolateParams=false) every statement with arguments costs three
// commands: COM_STMT_PREPARE and COM_STMT_EXECUTE, two round trips, then
// COM_STMT_CLOSE. A statement whose values are already literals in its text
// goes as one COM_QUERY: one round trip, and the server parses it once
// instead of preparing, executing and closing.
//
// Values are written so that no caller data is ever parsed as SQL: strings
// and bytes as hexadecimal literals (X'…', whatever the connection's
// character set and SQL mode), integers by strconv, times as
// 'YYYY-MM-DD hh:mm:ss.ffffff' in the connection's time zone, the way the
// driver itself sends them.

// MaxLiteralBytes bounds a literal statement's text. A larger statement
// goes through the driver's arguments instead, which send the bytes as they
// are rather than hex-encoded.
const MaxLiteralBytes = 256 << 10

// Literals writes SQL literals for one database handle.
type Literals struct{ loc *time.Location }

// LiteralsFor returns the literal writer for db when its dialector is
// gorm's MySQL dialector opened from a DSN, whose time zone (the DSN's loc)
// is then known; ok is false otherwise, and the caller keeps to arguments.
//
// It is false too on a handle with gorm's PrepareStmt (in its Config or
// its session): gorm prepares every distinct statement text once and keeps
// it, so literal statements, one text per ID, would pile up prepared
// statements on the server until its max_prepared_stmt_count, after which
// every prepared statement on that server fails. With arguments the
// statements are a handful, prepared once.
func LiteralsFor(db *gorm.DB) (l Literals, ok bool) {
	if db == nil || preparesStatements(db) {
		return Literals{}, false
	}
	d, isMySQL := db.Dialector.(*gmysql.Dialector)
	if !isMySQL || d.Config == nil || d.DSNConfig == nil || d.DSNConfig.Loc == nil || d.DSNConfig.InterpolateParams {
		// With interpolateParams the driver already sends one COM_QUERY.
		return Literals{}, false
	}
	return Literals{loc: d.DSNConfig.Loc}, true
}

// Bytes appends b as a hexadecimal literal.
func (Literals) Bytes(buf []byte, b []byte) []byte {
	buf = append(buf, "X'"...)
	buf = hex.AppendEncode(buf, b)
	return append(buf, '\'')
}

// String appends s as a hexadecimal literal: its bytes, which a text
// column takes in its own character set.
func (l Literals) String(buf []byte, s string) []byte {
	buf = append(buf, "X'"...)
	buf = hex.AppendEncode(buf, []byte(s))
	return append(buf, '\'')
}

// Int appends v.
func (Literals) Int(buf []byte, v int64) []byte { return strconv.AppendInt(buf, v, 10) }

// Time appends t as a DATETIME(6) literal in the connection's time zone.
func (l Literals) Time(buf []byte, t time.Time) []byte {
	buf = append(buf, '\'')
	buf = t.In(l.loc).AppendFormat(buf, "2006-01-02 15:04:05.000000")
	return append(buf, '\'')
}

// preparesStatements reports whether db prepares and caches its statements
// (gorm's PrepareStmt, set in its Config or with Session).
func preparesStatements(db *gorm.DB) bool {
	if db.Config != nil && db.PrepareStmt {
		return true
	}
	if db.Statement != nil {
		switch db.Statement.ConnPool.(type) {
		case *gorm.PreparedStmtDB, *gorm.PreparedStmtTX:
			return true
		}
	}
	return false
}
