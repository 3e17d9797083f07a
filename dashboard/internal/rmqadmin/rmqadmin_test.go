package rmqadmin

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
)

// wireHeader is a remoting wireHeader's header, as the fake server reads
// and writes it.
type wireHeader struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Opaque    int32             `json:"opaque"`
	Flag      int               `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields"`
}

// The name server's codes the fake server is told to answer with.
const (
	codeGetRouteInfo = 105
	resTopicNotExist = 17
)

// fakeServer answers one request per connection with code, ext and body,
// and records the requests' headers. It speaks the frame format only; the
// tests against the real broker are the dashboard's.
func fakeServer(t *testing.T, code int, ext map[string]string, body string) (string, <-chan wireHeader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan wireHeader, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var lens [8]byte
			if _, err := io.ReadFull(conn, lens[:]); err != nil {
				conn.Close()
				continue
			}
			total := binary.BigEndian.Uint32(lens[:4])
			hlen := binary.BigEndian.Uint32(lens[4:]) & 0xFFFFFF
			rest := make([]byte, total-4)
			_, _ = io.ReadFull(conn, rest)
			var req wireHeader
			_ = json.Unmarshal(rest[:hlen], &req)
			got <- req
			res, _ := json.Marshal(wireHeader{Code: code, Language: "JAVA", Opaque: req.Opaque, Flag: 1, ExtFields: ext})
			frame := make([]byte, 8, 8+len(res)+len(body))
			binary.BigEndian.PutUint32(frame[:4], uint32(4+len(res)+len(body)))
			binary.BigEndian.PutUint32(frame[4:], uint32(len(res)))
			frame = append(append(frame, res...), body...)
			_, _ = conn.Write(frame)
			conn.Close()
		}
	}()
	return ln.Addr().String(), got
}

// TestRouteReadsFastjsonKeys: a route whose broker addresses are keyed by
// unquoted integers, as the name server writes them, is read, and only
// masters (broker ID 0) are used.
func TestRouteReadsFastjsonKeys(t *testing.T) {
	body := `{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b1","cluster":"c"}],` +
		`"queueDatas":[{"brokerName":"b1","perm":6,"readQueueNums":2,"writeQueueNums":2}]}`
	addr, got := fakeServer(t, 0, nil, body)
	c := &Client{NameServers: []string{addr}}
	r, err := c.Route(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := []Queue{{Broker: "b1", Addr: "10.0.0.1:10911", ID: 0}, {Broker: "b1", Addr: "10.0.0.1:10911", ID: 1}}
	if len(r.Queues) != 2 || r.Queues[0] != want[0] || r.Queues[1] != want[1] {
		t.Fatalf("queues = %+v, want %+v", r.Queues, want)
	}
	req := <-got
	if req.Code != codeGetRouteInfo || req.ExtFields["topic"] != "orders" {
		t.Fatalf("request = %+v", req)
	}
}

// TestAnswersByCode: a missing topic, a missing offset and a failure
// each come back as what they are.
func TestAnswersByCode(t *testing.T) {
	ctx := context.Background()
	addr, _ := fakeServer(t, resTopicNotExist, nil, "")
	if _, err := (&Client{NameServers: []string{addr}}).Route(ctx, "nope"); !errors.Is(err, ErrTopicNotExist) {
		t.Fatalf("route of a missing topic: %v", err)
	}
	addr, _ = fakeServer(t, resQueryNotFound, nil, "")
	if _, err := (&Client{}).ConsumerOffset(ctx, "g", "t", Queue{Addr: addr}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("offset of a group without one: %v", err)
	}
	addr, _ = fakeServer(t, 0, map[string]string{"offset": "42"}, "")
	if n, err := (&Client{}).MaxOffset(ctx, "t", Queue{Addr: addr, ID: 3}); err != nil || n != 42 {
		t.Fatalf("max offset = %d, %v", n, err)
	}
	addr, _ = fakeServer(t, 1, nil, "")
	if _, err := (&Client{}).MinOffset(ctx, "t", Queue{Addr: addr}); err == nil {
		t.Fatal("a system error was taken for an offset")
	}
	if _, err := (&Client{}).Route(ctx, "t"); err == nil {
		t.Fatal("no name server configured, yet a route")
	}
}

// TestConnections: a group with connected consumers counts them; one the
// broker reports not online has none; another code is an error.
func TestConnections(t *testing.T) {
	ctx := context.Background()
	addr, got := fakeServer(t, 0, nil, `{"connectionSet":[{"clientId":"a","language":"GO"},{"clientId":"b","language":"JAVA"}],"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","subscriptionTable":{}}`)
	if n, err := (&Client{}).Connections(ctx, addr, "g1"); err != nil || n != 2 {
		t.Fatalf("connections = %d, %v", n, err)
	}
	if req := <-got; req.Code != codeGetConsumerConns || req.ExtFields["consumerGroup"] != "g1" {
		t.Fatalf("request = %+v", req)
	}
	addr, _ = fakeServer(t, resConsumerNotOnline, nil, "")
	if n, err := (&Client{}).Connections(ctx, addr, "g2"); err != nil || n != 0 {
		t.Fatalf("connections of an offline group = %d, %v", n, err)
	}
	addr, _ = fakeServer(t, 1, nil, "")
	if _, err := (&Client{}).Connections(ctx, addr, "g3"); err == nil {
		t.Fatal("a system error was taken for an answer")
	}
}
