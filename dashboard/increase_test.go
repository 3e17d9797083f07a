package dashboard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAddIncreaseHandlesRestarts: the history sums each instance's
// increase; a counter that went down restarted and counts whole.
func TestAddIncreaseHandlesRestarts(t *testing.T) {
	t.Parallel()
	sum := addIncrease(nil, []int64{10, 5, 0}, []int64{4, 5, 0})
	require.Equal(t, []int64{6, 0, 0}, sum)
	sum = addIncrease(sum, []int64{3, 7, 1}, []int64{9, 2, 0}) // first restarted
	require.Equal(t, []int64{9, 5, 1}, sum)
	sum = addIncrease(sum, []int64{2, 2, 2}, nil) // new instance
	require.Equal(t, []int64{11, 7, 3}, sum)
}
