// Package redact formats connection settings for display without their
// secrets. txmsgctl and the dashboard print databases through it.
package redact

import "github.com/go-sql-driver/mysql"

// DSN is cfg as a DSN with the password masked and the parameters left
// out (they may carry credentials too).
func DSN(cfg *mysql.Config) string {
	c := cfg.Clone()
	if c.Passwd != "" {
		c.Passwd = "****"
	}
	c.Params = nil
	return c.FormatDSN()
}
