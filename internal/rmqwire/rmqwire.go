// Package rmqwire speaks RocketMQ's remoting protocol for one request at
// a time, bounded by a context: the framing ([Invoke]), the name
// server's two answers txmsg reads (a topic's route and the cluster's
// brokers), a controller's view of a broker group ([ReplicaInfo]), and two broker reads of the reconciler's (messages by key,
// [QueryByKey], which the dashboard uses too, and a broker's runtime
// information, [RuntimeInfo]). The dashboard's other broker queries build
// on Invoke. The client library's own calls take no context and
// wait up to 6 s per name server and topic, and the client reports a name
// server that does not answer the same way as a topic that does not exist.
package rmqwire

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"
)

// Request codes and response codes of the remoting protocol.
const (
	codeGetRouteInfoByTopic  = 105
	codeGetBrokerClusterInfo = 106
	// codeControllerGetReplicaInfo asks a controller (RocketMQ 5.x
	// controller mode) for a broker group's master and in-sync set.
	codeControllerGetReplicaInfo = 1004
	codeSuccess                  = 0
	codeTopicNotExist            = 17
)

// maxFrame bounds a response: a cluster description is a few KB, a query
// by key returns up to its maximum number of messages.
const maxFrame = 64 << 20

// ErrTopicNotExist means the name server answered that it has no route
// for the topic.
var ErrTopicNotExist = errors.New("the name server has no route for the topic")

// Answer is a server's answer to a request.
type Answer struct {
	Code   int
	Remark string
	// Ext is the answer header's extFields (an offset query's "offset").
	Ext  map[string]string
	Body []byte
}

type header struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
}

var opaque atomic.Int32

// Invoke sends one request to the name server or broker at addr and
// reads its answer. The whole
// exchange (connect, TLS handshake, write, read) ends when ctx does; an
// address that accepts connections but never answers costs no more.
func Invoke(ctx context.Context, addr string, useTLS bool, code int, ext map[string]string) (*Answer, error) {
	c, err := Dial(ctx, addr, useTLS)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Invoke(ctx, code, ext)
}

// Conn is one connection to a name server or broker, for requests one at
// a time: [Conn.Invoke] is [Invoke] without the connect. It is not safe
// for concurrent use. After an error, close it.
type Conn struct {
	conn net.Conn
	addr string
}

// Dial connects to the name server or broker at addr, within ctx.
func Dial(ctx context.Context, addr string, useTLS bool) (*Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	if useTLS {
		stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
		// As the client: its TLS does not verify the server's certificate.
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the client's own setting
		err := tc.HandshakeContext(ctx)
		if !stop() || err != nil {
			_ = conn.Close()
			if err == nil {
				err = ctx.Err()
			}
			return nil, ctxErr(ctx, err)
		}
		conn = tc
	}
	return &Conn{conn: conn, addr: addr}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// Invoke sends one request on c and reads its answer, within ctx.
func (c *Conn) Invoke(ctx context.Context, code int, ext map[string]string) (*Answer, error) {
	conn, addr := c.conn, c.addr
	dl, _ := ctx.Deadline() // the zero time, no deadline, when ctx has none
	_ = conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	id := opaque.Add(1)
	h, err := json.Marshal(header{Code: code, Language: "GO", Version: 317, Opaque: id, ExtFields: ext})
	if err != nil {
		return nil, err
	}
	frame := make([]byte, 8, 8+len(h))
	binary.BigEndian.PutUint32(frame[0:4], uint32(4+len(h)))
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(h))) // serialization type 0: JSON
	frame = append(frame, h...)
	if _, err := conn.Write(frame); err != nil {
		return nil, ctxErr(ctx, err)
	}
	for {
		var lens [8]byte
		if _, err := io.ReadFull(conn, lens[:]); err != nil {
			return nil, ctxErr(ctx, err)
		}
		total := binary.BigEndian.Uint32(lens[0:4])
		hlen := binary.BigEndian.Uint32(lens[4:8]) & 0xFFFFFF
		if total > maxFrame || hlen+4 > total {
			return nil, fmt.Errorf("not a RocketMQ server: bad frame from %s", addr)
		}
		if typ := lens[4]; typ != 0 {
			return nil, fmt.Errorf("answer from %s in serialization %d, not JSON", addr, typ)
		}
		rest := make([]byte, total-4)
		if _, err := io.ReadFull(conn, rest); err != nil {
			return nil, ctxErr(ctx, err)
		}
		var rh header
		if err := json.Unmarshal(rest[:hlen], &rh); err != nil {
			return nil, fmt.Errorf("not a RocketMQ server: answer from %s: %w", addr, err)
		}
		if rh.Opaque != id || rh.Flag&1 == 0 {
			continue // not the answer to this request
		}
		if !stop() {
			// ctx ended as the answer came: the connection's deadline
			// is spent, so it must not be used again.
			return nil, ctxErr(ctx, context.Cause(ctx))
		}
		return &Answer{Code: rh.Code, Remark: rh.Remark, Ext: rh.ExtFields, Body: rest[hlen:]}, nil
	}
}

// ctxErr returns ctx's cause, which says why a connect, read or write
// failed, when ctx has ended, else err.
func ctxErr(ctx context.Context, err error) error {
	var ne net.Error
	if _, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() {
		// The connection's deadline is ctx's, which its timer may mark
		// done a moment later.
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("no answer: %w", context.Cause(ctx))
	}
	return err
}

// QueueData is one broker's queues of a topic.
type QueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
}

// BrokerData is one broker (a master and its slaves) of a cluster.
type BrokerData struct {
	Cluster    string `json:"cluster"`
	BrokerName string `json:"brokerName"`
	// BrokerAddrs maps broker ID to address; ID 0 is the master.
	BrokerAddrs map[string]string `json:"brokerAddrs"`
}

// Master returns the master's address, or "".
func (b BrokerData) Master() string { return b.BrokerAddrs["0"] }

// Route is a topic's route.
type Route struct {
	QueueDatas  []QueueData  `json:"queueDatas"`
	BrokerDatas []BrokerData `json:"brokerDatas"`
}

// ClusterInfo is the name server's table of brokers.
type ClusterInfo struct {
	BrokerAddrTable  map[string]BrokerData `json:"brokerAddrTable"`
	ClusterAddrTable map[string][]string   `json:"clusterAddrTable"`
}

// TopicRoute asks the name server at addr for topic's route. It returns an
// error wrapping [ErrTopicNotExist] when the name server has none.
func TopicRoute(ctx context.Context, addr string, useTLS bool, topic string) (*Route, error) {
	a, err := Invoke(ctx, addr, useTLS, codeGetRouteInfoByTopic, map[string]string{"topic": topic})
	if err != nil {
		return nil, err
	}
	switch a.Code {
	case codeSuccess:
	case codeTopicNotExist:
		return nil, fmt.Errorf("%w: %s", ErrTopicNotExist, topic)
	default:
		return nil, fmt.Errorf("route of %s: the name server answered code %d: %s", topic, a.Code, a.Remark)
	}
	var r Route
	if err := decode(a.Body, &r); err != nil {
		return nil, fmt.Errorf("route of %s: %w", topic, err)
	}
	return &r, nil
}

// Cluster asks the name server at addr for its brokers and clusters.
func Cluster(ctx context.Context, addr string, useTLS bool) (*ClusterInfo, error) {
	a, err := Invoke(ctx, addr, useTLS, codeGetBrokerClusterInfo, nil)
	if err != nil {
		return nil, err
	}
	if a.Code != codeSuccess {
		return nil, fmt.Errorf("cluster info: the name server answered code %d: %s", a.Code, a.Remark)
	}
	var ci ClusterInfo
	if err := decode(a.Body, &ci); err != nil {
		return nil, fmt.Errorf("cluster info: %w", err)
	}
	return &ci, nil
}

// Replicas is what a RocketMQ 5 controller holds about one broker group:
// the master it elected and the group's in-sync set.
type Replicas struct {
	MasterAddr     string
	MasterBrokerID int64
	// MasterEpoch grows by one with every election.
	MasterEpoch int
	// SyncStateSet holds the controller's broker IDs of the brokers that
	// have every message the master acknowledged (the master's own
	// included): the ones the controller may elect.
	SyncStateSet      []int64 `json:"syncStateSet"`
	SyncStateSetEpoch int     `json:"syncStateSetEpoch"`
}

// ReplicaInfo asks the controller at addr (RocketMQ 5's controller mode)
// for the broker group brokerName's master and in-sync set.
func ReplicaInfo(ctx context.Context, addr string, useTLS bool, brokerName string) (*Replicas, error) {
	a, err := Invoke(ctx, addr, useTLS, codeControllerGetReplicaInfo, map[string]string{"brokerName": brokerName})
	if err != nil {
		return nil, err
	}
	if a.Code != codeSuccess {
		return nil, fmt.Errorf("replica info of %s: the controller answered code %d: %s", brokerName, a.Code, a.Remark)
	}
	var r Replicas
	if err := decode(a.Body, &r); err != nil {
		return nil, fmt.Errorf("replica info of %s: %w", brokerName, err)
	}
	r.MasterAddr = a.Ext["masterAddress"]
	r.MasterBrokerID, _ = strconv.ParseInt(a.Ext["masterBrokerId"], 10, 64)
	r.MasterEpoch, _ = strconv.Atoi(a.Ext["masterEpoch"])
	return &r, nil
}

// numberKey matches an object key that is a bare number, as the name
// server writes the broker ID keys of brokerAddrs ({0:"host:port"}).
var numberKey = regexp.MustCompile(`([{,])(-?[0-9]+):`)

// decode parses a name server's body: JSON but for bare number keys.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err == nil {
		return nil
	}
	fixed := numberKey.ReplaceAll(body, []byte(`$1"$2":`))
	if err := json.Unmarshal(fixed, v); err != nil {
		return fmt.Errorf("cannot parse the name server's answer: %w (%.200q)", err, bytes.TrimSpace(body))
	}
	return nil
}

// Broker request and response codes the reconciler and the dashboard use.
const (
	codeQueryMessage         = 12
	codeGetBrokerRuntimeInfo = 28
	codeQueryNotFound        = 22
)

// QueryByKey asks the broker at addr for up to max messages of topic
// stored under key (the broker's message key index) between from and to.
// The index matches keys by hash, so the answer may hold messages with
// other keys; callers compare. No message is an empty answer, not an
// error.
func QueryByKey(ctx context.Context, addr string, useTLS bool, topic, key string, max int, from, to time.Time) ([]byte, bool, error) {
	c, err := Dial(ctx, addr, useTLS)
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	return c.QueryByKey(ctx, topic, key, max, from, to)
}

// QueryByKey is the package's QueryByKey on c.
func (c *Conn) QueryByKey(ctx context.Context, topic, key string, max int, from, to time.Time) ([]byte, bool, error) {
	addr := c.addr
	ext := map[string]string{
		"topic":             topic,
		"key":               key,
		"maxNum":            strconv.Itoa(max),
		"beginTimestamp":    strconv.FormatInt(from.UnixMilli(), 10),
		"endTimestamp":      strconv.FormatInt(to.UnixMilli(), 10),
		"_UNIQUE_KEY_QUERY": "false",
	}
	a, err := c.Invoke(ctx, codeQueryMessage, ext)
	if err != nil {
		return nil, false, err
	}
	switch a.Code {
	case codeSuccess:
		return a.Body, true, nil
	case codeQueryNotFound:
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("query %s by key on %s: code %d: %s", topic, addr, a.Code, a.Remark)
	}
}

// CommitLogMaxOffset reads "commitLogMaxOffset", the end of the broker's
// commit log, from a RuntimeInfo table.
func CommitLogMaxOffset(info map[string]string) (int64, error) {
	v, ok := info["commitLogMaxOffset"]
	if !ok {
		return 0, errors.New("the broker's runtime information has no commitLogMaxOffset")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("commitLogMaxOffset %q: %w", v, err)
	}
	return n, nil
}

// RuntimeInfo asks the broker at addr for its runtime table
// (GET_BROKER_RUNTIME_INFO): string values by name, among them
// "bootTimestamp" (when the broker process started, in Unix
// milliseconds) and "commitLogMaxOffset".
func RuntimeInfo(ctx context.Context, addr string, useTLS bool) (map[string]string, error) {
	a, err := Invoke(ctx, addr, useTLS, codeGetBrokerRuntimeInfo, nil)
	if err != nil {
		return nil, err
	}
	if a.Code != codeSuccess {
		return nil, fmt.Errorf("runtime info of %s: code %d: %s", addr, a.Code, a.Remark)
	}
	var out struct {
		Table map[string]string `json:"table"`
	}
	if err := decode(a.Body, &out); err != nil {
		return nil, fmt.Errorf("runtime info of %s: %w", addr, err)
	}
	return out.Table, nil
}
