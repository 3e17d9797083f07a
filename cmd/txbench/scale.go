package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/txmsg/txmsg/adapters/outbox"
)

// parseScale reads the -scale-relays list.
func parseScale(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-scale-relays: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runScale is the scale-out table: for each relay count n, n relay
// processes, one relay each, drain a backlog of -backlog rows, and the raw
// client sends as many messages from n workers.
//
// The backlog is written with its rows not yet due; the relay processes
// start, and once they have spread the bucket leases between them the
// rows are made due in one statement, which starts the clock. So the
// figure is the drain rate of relays that were already running, as
// replicas of a service are, not of relays starting up together.
func (b *bench) runScale(ctx context.Context) error {
	counts, err := parseScale(b.cfg.ScaleRelays)
	if err != nil {
		return err
	}
	best, bestN := 0.0, 0
	rates := map[int]float64{}
	for _, n := range counts {
		purpose := fmt.Sprintf("scale%d", n)
		label := fmt.Sprintf("S%d", n)
		rate, err := b.scaleDrain(ctx, label, purpose, n)
		if err != nil {
			return err
		}
		rates[n] = rate
		if rate > best {
			best, bestN = rate, n
		}
		_, raw, err := b.rawSend(ctx, "R"+strconv.Itoa(n), purpose, n)
		if err != nil {
			return err
		}
		b.res.extra[fmt.Sprintf("scale_relays_%d_msgs_per_s", n)] = rate
		b.res.extra[fmt.Sprintf("scale_raw_%d_msgs_per_s", n)] = raw
		if raw > 0 {
			b.res.extra[fmt.Sprintf("scale_ratio_relay_raw_%d", n)] = rate / raw
		}
	}
	for _, n := range counts {
		if best > 0 {
			b.res.extra[fmt.Sprintf("scale_ratio_vs_best_%d", n)] = rates[n] / best
		}
	}
	b.res.extra["scale_best_relays"] = bestN
	return nil
}

// scaleChild is one running relay process.
type scaleChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// scaleDrain fills a backlog, runs n relay processes on it and returns the
// drain rate.
func (b *bench) scaleDrain(ctx context.Context, label, purpose string, n int) (float64, error) {
	topic, err := b.env.topic(ctx, purpose)
	if err != nil {
		return 0, err
	}
	table := "outbox_" + purpose
	defer b.env.dropTable(context.WithoutCancel(ctx), table, table+"_lease", table+"_relay")
	if err := b.fillBacklog(ctx, label, table, topic, b.cfg.Backlog); err != nil {
		return 0, err
	}
	hold := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := b.env.db.WithContext(ctx).Table(table).Where("status = ?", outbox.StatusPending).
		Update("next_attempt_at", hold).Error; err != nil {
		return 0, fmt.Errorf("hold the backlog: %w", err)
	}
	sleepCtx(ctx, b.cfg.Settle)

	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	children := make([]*scaleChild, 0, n)
	defer func() {
		for _, c := range children {
			_ = c.stdin.Close()
		}
		for _, c := range children {
			_ = c.cmd.Wait()
		}
	}()
	for i := range n {
		spec := childSpec{
			Label: fmt.Sprintf("%s.%d", label, i), DSN: b.env.dsn, NameServer: b.cfg.NameServer, Group: b.env.group(purpose),
			Table: table, Topic: topic, Relays: 1, BatchSize: b.cfg.RelayBatchSize,
			RelayName: fmt.Sprintf("relay-%02d", i), Gated: true,
		}
		js, err := json.Marshal(spec)
		if err != nil {
			return 0, err
		}
		cmd := exec.CommandContext(ctx, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(js))
		cmd.Stderr = b.progress.w
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("relay process: %w", err)
		}
		children = append(children, &scaleChild{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)})
	}
	for i, c := range children {
		line, err := c.out.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			return 0, fmt.Errorf("relay process %d did not start: %q %v", i, line, err)
		}
	}
	// Wait for the leases to spread: every bucket owned, by as many
	// relays as can own one, none holding more than its fair share.
	want := min(n, outbox.DefaultBuckets)
	spread := time.Now()
	for {
		var owners []struct {
			Owner string
			N     int
		}
		err := b.env.db.WithContext(ctx).Table(table+"_lease").Select("owner, COUNT(*) AS n").
			Where("owner <> '' AND expires_at > ?", time.Now().UTC()).Group("owner").Scan(&owners).Error
		if err != nil {
			return 0, err
		}
		total, most := 0, 0
		for _, o := range owners {
			total += o.N
			most = max(most, o.N)
		}
		if len(owners) == want && total == outbox.DefaultBuckets && most <= (outbox.DefaultBuckets+want-1)/want {
			break
		}
		if time.Since(spread) > 2*time.Minute {
			b.progress.printf("%-4s leases not spread after 2 min (%d owners, %d buckets owned); measuring anyway", label, len(owners), total)
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	b.progress.printf("%-4s %d relay processes running; leases spread in %s", label, n, time.Since(spread).Round(time.Millisecond))

	// The rows become due when this UPDATE commits: the clock starts
	// then, not while InnoDB rewrites 100,000 index entries.
	r0 := time.Now()
	if err := b.env.db.WithContext(ctx).Table(table).Where("status = ?", outbox.StatusPending).
		Update("next_attempt_at", time.Now().UTC()).Error; err != nil {
		return 0, fmt.Errorf("release the backlog: %w", err)
	}
	// CPU is counted over the drain alone, the relay processes included.
	pids := make([]int, len(children))
	for i, c := range children {
		pids[i] = c.cmd.Process.Pid
	}
	roles := findCPURoles()
	cpu0 := roles.snap(pids...)
	t0 := time.Now()
	b.progress.printf("%-4s backlog released in %s; draining", label, t0.Sub(r0).Round(time.Millisecond))
	for {
		var one []int64
		err := b.env.db.WithContext(ctx).Table(table).Where("status = ?", outbox.StatusPending).Limit(1).Pluck("id", &one).Error
		if err != nil {
			return 0, err
		}
		if len(one) == 0 {
			break
		}
		if time.Since(t0) > time.Hour {
			return 0, fmt.Errorf("%s: rows still pending after an hour", label)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	elapsed := time.Since(t0)
	cpu := roles.snap(pids...).since(cpu0, 0)
	var drained, calls int64
	for i, c := range children {
		_ = c.stdin.Close()
		rest, _ := io.ReadAll(c.out)
		if err := c.cmd.Wait(); err != nil {
			return 0, fmt.Errorf("relay process %d: %w", i, err)
		}
		var res childResult
		if err := json.Unmarshal(rest, &res); err != nil {
			return 0, fmt.Errorf("relay process %d printed %q: %w", i, rest, err)
		}
		drained += res.Drained
		calls += res.Publishes
	}
	children = nil
	rate := float64(b.cfg.Backlog) / elapsed.Seconds()
	b.res.add(row{
		Phase: label, What: fmt.Sprintf("%d relay processes drain %d-row backlog", n, b.cfg.Backlog), Rate: rate,
		Unit: "msg/s", Ops: int64(b.cfg.Backlog), Secs: elapsed.Seconds(), CPU: cpu,
		Note: fmt.Sprintf("%d acknowledged, %d Publish calls", drained, calls),
	})
	return rate, nil
}
