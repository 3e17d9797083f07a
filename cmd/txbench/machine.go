package main

import (
	"context"
	"os"
	"runtime"
	"strings"

	"gorm.io/gorm"
)

// machine describes where a run ran, for the report: the figures mean
// little without the core count, the database's durability settings and
// the load other programs put on the machine.
func machine(ctx context.Context, db *gorm.DB) map[string]any {
	m := map[string]any{"nproc": runtime.NumCPU(), "go": runtime.Version()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		m["mem_total"] = strings.Join(strings.Fields(line)[1:], " ")
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m["loadavg_at_start"] = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	var vars []struct {
		Name  string `gorm:"column:Variable_name"`
		Value string `gorm:"column:Value"`
	}
	err := db.WithContext(ctx).Raw(`SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'tx_isolation',
		'transaction_isolation', 'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', 'innodb_buffer_pool_size',
		'innodb_log_file_size', 'innodb_flush_method', 'max_connections')`).Scan(&vars).Error
	if err != nil {
		m["database"] = "unknown: " + err.Error()
		return m
	}
	dbVars := map[string]string{}
	for _, v := range vars {
		dbVars[v.Name] = v.Value
	}
	m["database"] = dbVars
	return m
}
