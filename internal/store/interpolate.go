package store

import (
	"database/sql/driver"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Interpolate writes vars into the ? placeholders of query, which gorm
// built, and returns one statement with no arguments. ok is false, and
// the caller keeps to arguments, when query holds a quoted string (a ?
// inside it would be ambiguous), when the placeholders and vars do not
// match in number, when a value is of a type it does not write (see
// [Literals.Value]), or when the result exceeds MaxLiteralBytes.
// Backtick-quoted identifiers are copied as they are.
func (l Literals) Interpolate(query string, vars []any) (string, bool) {
	if strings.ContainsAny(query, `'"\`) {
		return "", false
	}
	buf := make([]byte, 0, len(query)+16*len(vars))
	n := 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch c {
		case '`':
			j := strings.IndexByte(query[i+1:], '`')
			if j < 0 {
				return "", false
			}
			buf = append(buf, query[i:i+j+2]...)
			i += j + 1
		case '?':
			if n == len(vars) {
				return "", false
			}
			var ok bool
			if buf, ok = l.Value(buf, vars[n]); !ok {
				return "", false
			}
			n++
		default:
			buf = append(buf, c)
		}
		if len(buf) > MaxLiteralBytes {
			return "", false
		}
	}
	if n != len(vars) {
		return "", false
	}
	return string(buf), true
}

// Value appends v as a literal: NULL for nil, integers of any kind,
// booleans as 1 or 0, strings and bytes as hexadecimal, times as
// DATETIME(6); pointers and driver.Valuers by what they hold. ok is false
// for anything else (floats among them, which a literal could round).
func (l Literals) Value(buf []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(buf, "NULL"...), true
	case time.Time:
		return l.Time(buf, x), true
	case []byte:
		if x == nil {
			return append(buf, "NULL"...), true
		}
		return l.Bytes(buf, x), true
	case clause.Expr, *gorm.DB:
		return buf, false
	case driver.Valuer:
		rv := reflect.ValueOf(x)
		if rv.Kind() == reflect.Pointer && rv.IsNil() {
			return append(buf, "NULL"...), true
		}
		dv, err := x.Value()
		if err != nil {
			return buf, false
		}
		return l.Value(buf, dv)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return l.Int(buf, rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(buf, rv.Uint(), 10), true
	case reflect.Bool:
		if rv.Bool() {
			return append(buf, '1'), true
		}
		return append(buf, '0'), true
	case reflect.String:
		return l.String(buf, rv.String()), true
	case reflect.Pointer:
		if rv.IsNil() {
			return append(buf, "NULL"...), true
		}
		return l.Value(buf, rv.Elem().Interface())
	}
	return buf, false
}

// Literal builds a statement with build on a dry-run session of q, which
// runs nothing, and returns it as one literal query for q to run (Raw or
// Exec) when q's handle allows literals (see [LiteralsFor] and
// [Literals.Interpolate]). ok is false when the statement is to be run as
// built, with arguments.
func Literal(q *gorm.DB, build func(dry *gorm.DB) *gorm.DB) (stmt string, ok bool) {
	lit, ok := LiteralsFor(q)
	if !ok {
		return "", false
	}
	dry := build(q.Session(&gorm.Session{DryRun: true}))
	if dry.Error != nil {
		return "", false
	}
	return lit.Interpolate(dry.Statement.SQL.String(), dry.Statement.Vars)
}
