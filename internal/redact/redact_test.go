package redact

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestDSNMasksThePassword(t *testing.T) {
	cfg, err := mysql.ParseDSN("app:s3cret-pw-771@tcp(db.internal:3306)/orders?parseTime=true&token=abc123secret")
	if err != nil {
		t.Fatal(err)
	}
	got := DSN(cfg)
	for _, secret := range []string{"s3cret-pw-771", "abc123secret"} {
		if strings.Contains(got, secret) {
			t.Fatalf("DSN(%q) still holds %q", got, secret)
		}
	}
	if !strings.Contains(got, "app:****@tcp(db.internal:3306)/orders") {
		t.Fatalf("DSN = %q, want the user, address and database kept", got)
	}
}
