package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The machine is small and shared by the database, the broker and the
// benchmark, so every phase records who used the CPU during its measured
// window: that is what limits most figures. Linux only; elsewhere the
// figures stay zero.

// clockTicks is USER_HZ, the unit of /proc CPU times; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuRoles finds the processes whose CPU time a phase reports.
type cpuRoles struct {
	db, broker []int // mariadbd/mysqld; the RocketMQ name server and broker JVMs
}

func findCPURoles() cpuRoles {
	var r cpuRoles
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(d + "/comm")
		switch name := strings.TrimSpace(string(comm)); name {
		case "mariadbd", "mysqld":
			r.db = append(r.db, pid)
		case "java":
			cmd, _ := os.ReadFile(d + "/cmdline")
			if bytes.Contains(cmd, []byte("rocketmq")) {
				r.broker = append(r.broker, pid)
			}
		}
	}
	return r
}

// cpuSnap is a reading of the CPU counters, in ticks.
type cpuSnap struct {
	at                time.Time
	roles             cpuRoles
	busy, total       uint64
	db, broker, bench uint64
}

// cpuStart finds the database and broker processes (they may have been
// restarted since the last phase) and reads the counters.
func cpuStart() cpuSnap { return findCPURoles().snap() }

// stop reads the counters again and returns the use since s. The ticks of
// a benchmark child process that has exited are no longer in /proc: pass
// them as extraBench.
func (s cpuSnap) stop(extraBench uint64) cpuUse { return s.roles.snap().since(s, extraBench) }

func procTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}

func sumTicks(pids []int) uint64 {
	var n uint64
	for _, p := range pids {
		n += procTicks(p)
	}
	return n
}

// snap reads the counters; bench are the benchmark's own processes.
func (r cpuRoles) snap(bench ...int) cpuSnap {
	s := cpuSnap{at: time.Now(), roles: r}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	s.db, s.broker = sumTicks(r.db), sumTicks(r.broker)
	s.bench = sumTicks(append([]int{os.Getpid()}, bench...))
	return s
}

// cpuUse is how many cores each party used on average over a window.
type cpuUse struct {
	Cores  int     `json:"cores"`
	Busy   float64 `json:"busy"`
	DB     float64 `json:"db"`
	Broker float64 `json:"broker"`
	Bench  float64 `json:"bench"`
	Other  float64 `json:"other"`
}

// delta is b-a, or 0 when a process restarted and its counter went back.
func delta(b, a uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

func (s cpuSnap) since(from cpuSnap, extraBench uint64) cpuUse {
	secs := s.at.Sub(from.at).Seconds()
	if secs <= 0 || s.total == 0 {
		return cpuUse{}
	}
	cores := func(t uint64) float64 { return float64(t) / clockTicks / secs }
	u := cpuUse{
		Cores:  runtime.NumCPU(),
		DB:     cores(delta(s.db, from.db)),
		Broker: cores(delta(s.broker, from.broker)),
		Bench:  cores(delta(s.bench, from.bench) + extraBench),
	}
	// /proc/stat's busy share of all cores, scaled to cores.
	if total := delta(s.total, from.total); total > 0 {
		u.Busy = float64(delta(s.busy, from.busy)) / float64(total) * float64(u.Cores)
	}
	u.Other = max(u.Busy-u.DB-u.Broker-u.Bench, 0)
	return u
}

func (u cpuUse) String() string {
	if u.Cores == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f/%d: db %.2f, broker %.2f, bench %.2f, other %.2f", u.Busy, u.Cores, u.DB, u.Broker, u.Bench, u.Other)
}

// msPerOp is the CPU time the database, the broker and the benchmark spent
// per operation at rate operations per second, in milliseconds. Unlike the
// rate, it hardly depends on what else runs on the machine, so it compares
// phases even when other programs took some of the CPU.
func (u cpuUse) msPerOp(rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return (u.DB + u.Broker + u.Bench) / rate * 1000
}
