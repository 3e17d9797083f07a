package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Expected paths. Some of txmsg's own statements fail on purpose or on
// ordinary occasions: an insert that meets a duplicate key is how the
// inbox drops a redelivered copy and how the checker learns that an ID was
// used before, and statements of a component that is shutting down end
// with its cancelled context. The caller gets each as a result, so gorm's
// logger, which prints every failed statement at error level, must not
// print them as errors. Quiet gives txmsg's statements a logger that traces
// them as statements that succeeded and passes every other error on.

// Quiet returns db with a logger that traces, to db's logger, a statement
// cancelled by its own context (context.Canceled, or sql.ErrTxDone in a
// transaction the cancellation rolled back, while the statement's context
// is done) and a lookup that found nothing (gorm.ErrRecordNotFound)
// as if it had succeeded. Every other error goes to db's logger unchanged.
// Use it for txmsg's own statements, never for a handle given to the
// caller's code.
func Quiet(db *gorm.DB) *gorm.DB {
	if db == nil || db.Config == nil || db.Logger == nil {
		return db // never opened, or nothing to log to
	}
	return db.Session(&gorm.Session{Logger: quietLogger{inner: db.Logger}})
}

// QuietDuplicate is Quiet that also treats a duplicate-key error as
// expected: for inserts whose duplicate is a result, never for a handle
// given to the caller's code.
func QuietDuplicate(db *gorm.DB) *gorm.DB {
	if db == nil || db.Config == nil || db.Logger == nil {
		return db
	}
	return db.Session(&gorm.Session{Logger: quietLogger{inner: db.Logger, dup: db}})
}

type quietLogger struct {
	inner logger.Interface
	dup   *gorm.DB // set: duplicate keys are expected; the dialect translates them
}

func (l quietLogger) expected(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, gorm.ErrRecordNotFound):
		return true
	case ctx != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, sql.ErrTxDone)):
		// The statement's context was cancelled (a shutdown); a
		// transaction it cancelled is rolled back, and its later
		// statements fail with sql.ErrTxDone.
		return true
	case l.dup != nil:
		return IsDuplicate(l.dup, err)
	}
	return false
}

// LogMode implements logger.Interface.
func (l quietLogger) LogMode(level logger.LogLevel) logger.Interface {
	l.inner = l.inner.LogMode(level)
	return l
}

// Info implements logger.Interface.
func (l quietLogger) Info(ctx context.Context, msg string, args ...any) {
	l.inner.Info(ctx, msg, args...)
}

// Warn implements logger.Interface.
func (l quietLogger) Warn(ctx context.Context, msg string, args ...any) {
	l.inner.Warn(ctx, msg, args...)
}

// Error implements logger.Interface.
func (l quietLogger) Error(ctx context.Context, msg string, args ...any) {
	l.inner.Error(ctx, msg, args...)
}

// Trace implements logger.Interface.
func (l quietLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	if l.expected(ctx, err) {
		err = nil
	}
	l.inner.Trace(ctx, begin, fc, err)
}

// ParamsFilter implements gorm.ParamsFilter as db's logger does, if it
// does.
func (l quietLogger) ParamsFilter(ctx context.Context, sql string, params ...any) (string, []any) {
	if f, ok := l.inner.(gorm.ParamsFilter); ok {
		return f.ParamsFilter(ctx, sql, params...)
	}
	return sql, params
}
