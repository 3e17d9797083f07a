package rmqproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStockConf: the stock form's broker config names the instance and
// sets nothing else; the tuned form's keeps broker.conf's tuning. Stock
// reads the form back from the file.
func TestStockConf(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	lib := filepath.Join(cache, "rocketmq", "5.3.3", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	// The version's settings, so that no javap runs.
	keys := "bindAddress brokerClusterName brokerIP1 brokerId brokerName brokerRole listenPort namesrvAddr storePathCommitLog storePathRootDir transactionTimeOut\n"
	if err := os.WriteFile(filepath.Join(lib, ".keys-broker"), []byte(keys), 0o644); err != nil {
		t.Fatal(err)
	}
	identity := map[string]bool{"brokerClusterName": true, "brokerName": true, "brokerId": true, "brokerRole": true, "namesrvAddr": true,
		"brokerIP1": true, "listenPort": true, "bindAddress": true, "storePathRootDir": true, "storePathCommitLog": true}
	for _, stock := range []bool{true, false} {
		in, err := newTest(t, Config{Cache: cache, Version: "5.3.3", NameServer: "127.0.0.1:18876",
			Brokers: []Broker{{"broker-a", "127.0.0.1:19911"}}, Stock: stock})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.writeConfigs(in.brokers[0]); err != nil {
			t.Fatal(err)
		}
		if in.Stock() != stock {
			t.Errorf("stock %v: Stock() reads %v back", stock, in.Stock())
		}
		conf, err := readLines(filepath.Join(in.brokers[0].confDir(), "broker.conf"))
		if err != nil {
			t.Fatal(err)
		}
		tuned := false
		for _, line := range conf {
			m := settingRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if stock && !identity[m[1]] {
				t.Errorf("the stock form sets %q", line)
			}
			if line == "transactionTimeOut=1000" {
				tuned = true
			}
		}
		if !stock && !tuned {
			t.Errorf("the tuned form lost broker.conf's transactionTimeOut=1000:\n%s", strings.Join(conf, "\n"))
		}
	}
}

func TestDiskUsage(t *testing.T) {
	t.Parallel()
	pct, err := DiskUsage(filepath.Join(t.TempDir(), "not", "yet"))
	if err != nil || pct <= 0 || pct > 100 {
		t.Fatalf("DiskUsage of a directory to be: %.1f%%, %v", pct, err)
	}
	err = CheckStockDisk(t.TempDir())
	switch {
	case pct <= StockDiskCleanForciblyRatio && err != nil:
		t.Errorf("the disk is %.0f%% used; CheckStockDisk: %v", pct, err)
	case pct > StockDiskCleanForciblyRatio && (err == nil || !strings.Contains(err.Error(), "diskSpaceWarningLevelRatio")):
		t.Errorf("the disk is %.0f%% used; CheckStockDisk: %v, want an error naming the broker settings", pct, err)
	}
	t.Logf("the disk of the temporary directory is %.1f%% used", pct)
}

// A disk fuller than a stock broker works with gets an error that says
// how full it is and which broker settings that crosses.
func TestStockDiskError(t *testing.T) {
	t.Parallel()
	if err := stockDiskError("/store", 85); err != nil {
		t.Errorf("85%%: %v", err)
	}
	err := stockDiskError("/store", 91.2)
	if err == nil {
		t.Fatal("91% used: no error")
	}
	for _, want := range []string{"/store is 91% used", "diskSpaceCleanForciblyRatio", "diskSpaceWarningLevelRatio", "refuses every message", "TXMSG_CACHE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	t.Log(err)
}
