package rmqproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Disk thresholds of a broker with RocketMQ 5.3.3's stock settings
// (MessageStoreConfig; DefaultMessageStore.CleanCommitLogService), as
// percentages of the store's disk in use, measured the way the broker and
// df measure it: used / (used + available to unprivileged users).
const (
	// StockDiskMaxUsedSpaceRatio is diskMaxUsedSpaceRatio: above it the
	// broker deletes commit-log files older than fileReservedTime (72 h).
	StockDiskMaxUsedSpaceRatio = 75
	// StockDiskCleanForciblyRatio is diskSpaceCleanForciblyRatio: above
	// it the broker deletes commit-log files whatever their age (all but
	// the one it writes).
	StockDiskCleanForciblyRatio = 85
	// StockDiskWarningLevelRatio is diskSpaceWarningLevelRatio (the
	// broker caps it at 90): above it the broker marks its disk full and
	// refuses every message.
	StockDiskWarningLevelRatio = 90
)

// DiskUsage returns how full, in percent, the disk holding path is (path
// or, when it does not exist yet, its closest existing parent), computed
// as RocketMQ computes it (UtilAll.getDiskPartitionSpaceUsedPercent) and df
// shows it.
func DiskUsage(path string) (float64, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return 0, err
	}
	for {
		if _, err := os.Stat(p); err == nil || filepath.Dir(p) == p {
			break
		}
		p = filepath.Dir(p)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", p, err)
	}
	used := float64(st.Blocks-st.Bfree) * float64(st.Bsize)
	avail := float64(st.Bavail) * float64(st.Bsize)
	if used+avail <= 0 {
		return 0, fmt.Errorf("statfs %s: the disk reports no space", p)
	}
	return 100 * used / (used + avail), nil
}

// CheckStockDisk returns an error, saying how full the disk is and which
// broker setting that crosses, when the disk holding dir is fuller than a
// stock broker works with: above [StockDiskCleanForciblyRatio] it deletes
// stored messages whatever their age, above [StockDiskWarningLevelRatio] it
// refuses every message, so a run there fails or times out for a reason
// no test names.
func CheckStockDisk(dir string) error {
	pct, err := DiskUsage(dir)
	if err != nil {
		return fmt.Errorf("cannot tell how full the disk holding %s is: %w", dir, err)
	}
	return stockDiskError(dir, pct)
}

// stockDiskError is [CheckStockDisk]'s verdict on a disk pct% used.
func stockDiskError(dir string, pct float64) error {
	if pct <= StockDiskCleanForciblyRatio {
		return nil
	}
	what := fmt.Sprintf("deletes commit-log files whatever their age above %d%% (diskSpaceCleanForciblyRatio) and refuses every message above %d%% (diskSpaceWarningLevelRatio)",
		StockDiskCleanForciblyRatio, StockDiskWarningLevelRatio)
	return fmt.Errorf("the disk holding %s is %.0f%% used (as df counts it): a broker with RocketMQ's stock settings %s; "+
		"free space on that disk, or set TXMSG_CACHE to a directory on a disk at most %d%% used",
		dir, pct, what, StockDiskCleanForciblyRatio)
}

// Stock reports whether the broker's config file in the instance's
// directory was last written for the stock form ([Config.Stock]), that
// is, whether the broker the test bed runs on these ports has RocketMQ's
// stock settings.
func (in *Instance) Stock() bool {
	if len(in.brokers) != 1 || in.cfg.Cluster {
		return false
	}
	b, err := os.ReadFile(filepath.Join(in.brokers[0].confDir(), kindBroker+".conf"))
	if err != nil {
		return false
	}
	for _, line := range strings.SplitN(string(b), "\n", 4) {
		if form, ok := strings.CutPrefix(line, formLine); ok {
			return strings.TrimSpace(form) == "stock"
		}
	}
	return false
}

func formName(stock bool) string {
	if stock {
		return "stock (scripts/rocketmq/stock.conf)"
	}
	return "tuned (scripts/rocketmq/broker.conf)"
}

// errStockDisk wraps [CheckStockDisk]'s error for Start.
var errStockDisk = errors.New("the stock broker is not started")
