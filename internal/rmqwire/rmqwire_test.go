package rmqwire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeNumberKeys: the name server writes broker IDs as bare number
// keys, which encoding/json refuses; an address's colon stays as it is.
func TestDecodeNumberKeys(t *testing.T) {
	body := []byte(`{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}`)
	var ci ClusterInfo
	require.NoError(t, decode(body, &ci))
	require.Equal(t, "127.0.0.1:10911", ci.BrokerAddrTable["broker-a"].Master())
	require.Equal(t, "127.0.0.1:10921", ci.BrokerAddrTable["broker-a"].BrokerAddrs["1"])
	require.Equal(t, []string{"broker-a"}, ci.ClusterAddrTable["DefaultCluster"])

	require.ErrorContains(t, decode([]byte(`not json`), &ci), "cannot parse the name server's answer")
}

func TestCommitLogMaxOffset(t *testing.T) {
	n, err := CommitLogMaxOffset(map[string]string{"commitLogMaxOffset": "123456"})
	require.NoError(t, err)
	require.EqualValues(t, 123456, n)
	_, err = CommitLogMaxOffset(map[string]string{})
	require.EqualError(t, err, "the broker's runtime information has no commitLogMaxOffset")
	_, err = CommitLogMaxOffset(map[string]string{"commitLogMaxOffset": "x"})
	require.ErrorContains(t, err, `commitLogMaxOffset "x": `)
}
