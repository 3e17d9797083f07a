package txmsg

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewIDIsUUIDv7AndOrdered(t *testing.T) {
	t.Parallel()
	const n = 20000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = NewID()
	}
	require.True(t, sort.StringsAreSorted(ids), "IDs from one goroutine must sort in creation order")
	seen := make(map[string]bool, n)
	for _, id := range ids {
		require.Len(t, id, 36)
		require.Equal(t, byte('7'), id[14], "version nibble")
		require.Contains(t, "89ab", string(id[19]), "variant bits")
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
	}
}

func TestNewIDConcurrentUnique(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]string, 5000)
			for i := range local {
				local[i] = NewID()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if seen[id] {
					t.Errorf("duplicate ID %s", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, 40000)
}

func TestIDClockSurvivesClockStepBack(t *testing.T) {
	t.Parallel()
	var c idClock
	now := time.UnixMilli(1_800_000_000_000)
	var prev string
	for i := 0; i < 10000; i++ {
		var b [16]byte
		at := now
		if i%3 == 0 {
			at = now.Add(-time.Second) // the wall clock stepped back
		}
		c.next(&b, at)
		id := formatUUID(b)
		require.Greater(t, id, prev)
		prev = id
	}
}

func BenchmarkNewID(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = NewID()
	}
}

func TestIDTime(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	id := NewID()
	got, ok := IDTime(id)
	require.True(t, ok, id)
	require.False(t, got.Before(before), "%v before %v", got, before)
	require.False(t, got.After(time.Now()))
	for _, bad := range []string{"", "order-42", "01a2313e-0958-428d-bd18-f845d9dfa3d3", "01a2313e-0958-728d-cd18-f845d9dfa3d3", "01a2313e-0958-728d-bd18-f845d9dfa3dz", "01a2313e0958728dbd18f845d9dfa3d3xxxx"} {
		_, ok := IDTime(bad)
		require.False(t, ok, bad)
	}
}
