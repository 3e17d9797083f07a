package testbed

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// GormErrors is a gorm logger that records what gorm's default logger
// prints at error level: every statement that failed (gorm.ErrRecordNotFound
// included, as the default logger does) and every Error call. It prints
// nothing.
type GormErrors struct {
	mu   sync.Mutex
	errs []string
}

// WithGormErrors returns db with a new GormErrors as its logger, and the
// recorder.
func WithGormErrors(db *gorm.DB) (*gorm.DB, *GormErrors) {
	rec := &GormErrors{}
	return db.Session(&gorm.Session{Logger: rec}), rec
}

// LogMode implements logger.Interface.
func (r *GormErrors) LogMode(logger.LogLevel) logger.Interface { return r }

// Info implements logger.Interface.
func (r *GormErrors) Info(context.Context, string, ...any) {}

// Warn implements logger.Interface.
func (r *GormErrors) Warn(context.Context, string, ...any) {}

// Error implements logger.Interface.
func (r *GormErrors) Error(_ context.Context, msg string, args ...any) {
	r.add(fmt.Sprintf(msg, args...))
}

// Trace implements logger.Interface.
func (r *GormErrors) Trace(_ context.Context, _ time.Time, fc func() (string, int64), err error) {
	if err == nil {
		return
	}
	sql, _ := fc()
	r.add(err.Error() + " [" + sql + "]")
}

func (r *GormErrors) add(s string) {
	r.mu.Lock()
	r.errs = append(r.errs, s)
	r.mu.Unlock()
}

// All returns the recorded errors.
func (r *GormErrors) All() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// Containing returns the recorded errors that contain s.
func (r *GormErrors) Containing(s string) []string {
	var out []string
	for _, e := range r.All() {
		if strings.Contains(e, s) {
			out = append(out, e)
		}
	}
	return out
}
