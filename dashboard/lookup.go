package dashboard

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/dashboard/internal/rmqadmin"
	"github.com/txmsg/txmsg/txmsg"
)

// lookupLimit bounds the rows of each kind a transaction lookup shows.
const lookupLimit = 20

type txData struct {
	Query     string
	Searched  bool
	IDs       []txView
	OutboxErr string
	ParkedErr string
	Broker    bool
	BrokerMsg []brokerMessage
	BrokerErr string
	Topics    []string
}

// txView is what the tables say about one txmsg ID.
type txView struct {
	ID         string
	Barrier    string // committed, rolled_back, or "" for no row
	BarrierErr string
	Outbox     *outbox.Row
	Inbox      []txmsg.InboxRow
	InboxErr   string
	Parked     []txmsg.ParkedRow
}

type brokerMessage struct {
	Topic, MsgID, TxmsgID, Tags, Keys, Broker string
	QueueID                                   int
	Offset                                    int64
	StoredAt                                  time.Time
	Body                                      string // one line, for the table
}

func (d *Dashboard) transaction(r *http.Request) (string, string, any, error) {
	q, err := text(r.URL.Query(), "q")
	if err != nil {
		return "", "", nil, err
	}
	data := &txData{Query: q, Broker: d.rmq != nil}
	if q == "" {
		return "tx", "Transactions", data, nil
	}
	data.Searched = true
	ctx := r.Context()
	// The outbox and the parked messages are searched by ID and by key;
	// every txmsg ID found is then looked up everywhere.
	ids := []string{}
	seen := map[string]bool{}
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	topics := map[string]bool{}
	rows, err := d.ob.List(ctx, outbox.ListFilter{Key: q, Limit: lookupLimit})
	data.OutboxErr = errText(err)
	byID := map[string]*outbox.Row{}
	for i := range rows {
		byID[rows[i].MsgID] = &rows[i]
		add(rows[i].MsgID)
		topics[rows[i].Topic] = true
	}
	parked, err := d.inbox.Parked(ctx, txmsg.ParkedFilter{Key: q, Limit: lookupLimit})
	data.ParkedErr = errText(err)
	parkedByID := map[string][]txmsg.ParkedRow{}
	for _, p := range parked {
		parkedByID[p.MsgID] = append(parkedByID[p.MsgID], p)
		add(p.MsgID)
		topics[p.Topic] = true
	}
	add(q)
	for _, id := range ids {
		v := txView{ID: id, Outbox: byID[id], Parked: parkedByID[id]}
		state, err := d.chk.Lookup(ctx, id)
		v.Barrier, v.BarrierErr = state, errText(err)
		v.Inbox, err = d.inbox.Handled(ctx, id)
		v.InboxErr = errText(err)
		for _, in := range v.Inbox {
			topics[in.Topic] = true
		}
		if v.Barrier == "" && v.BarrierErr == "" && v.Outbox == nil && len(v.Inbox) == 0 && len(v.Parked) == 0 && id == q && len(ids) > 1 {
			continue // q was a key, not an ID
		}
		data.IDs = append(data.IDs, v)
	}
	for _, t := range d.cfg.Topics {
		topics[t] = true
	}
	for t := range topics {
		data.Topics = append(data.Topics, t)
	}
	sort.Strings(data.Topics)
	if d.rmq != nil {
		data.BrokerMsg, err = d.brokerByKey(ctx, data.Topics, q)
		data.BrokerErr = errText(err)
	}
	return "tx", "Transactions", data, nil
}

// brokerByKey asks every broker serving each topic for the messages
// stored under key in the last three days (the broker's default
// retention).
func (d *Dashboard) brokerByKey(ctx context.Context, topics []string, key string) ([]brokerMessage, error) {
	var (
		mu   sync.Mutex
		out  []brokerMessage
		errs []error
		wg   sync.WaitGroup
	)
	to := time.Now().Add(time.Minute)
	from := to.Add(-72 * time.Hour)
	for _, topic := range topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			route, err := d.rmq.Route(ctx, topic)
			if err != nil {
				if !errors.Is(err, rmqadmin.ErrTopicNotExist) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				return
			}
			asked := map[string]bool{}
			for _, q := range route.Queues {
				if asked[q.Addr] {
					continue
				}
				asked[q.Addr] = true
				msgs, err := d.rmq.QueryByKey(ctx, q.Addr, topic, key, 32, from, to)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, m := range msgs {
					out = append(out, toBrokerMessage(q.Broker, m))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].StoredAt.Before(out[j].StoredAt) })
	return out, errors.Join(errs...)
}

func toBrokerMessage(broker string, m *primitive.MessageExt) brokerMessage {
	topic := m.Topic
	if real := m.GetProperty(txmsg.PropertyTopic); real != "" && strings.HasPrefix(topic, "%") {
		topic = real
	}
	return brokerMessage{
		Topic: topic, MsgID: m.MsgId, TxmsgID: m.GetProperty(txmsg.PropertyID), Tags: m.GetTags(), Keys: m.GetKeys(),
		Broker: broker, QueueID: m.Queue.QueueId, Offset: m.QueueOffset, StoredAt: time.UnixMilli(m.StoreTimestamp), Body: bodyLine(m.Body),
	}
}

// bodyLine is a body on one line: its text when it is printable, else
// its first bytes in hex.
func bodyLine(b []byte) string {
	shown := b
	if len(shown) > 256 {
		shown = shown[:256]
	}
	if utf8.Valid(shown) && printable(string(shown)) {
		return strings.Join(strings.Fields(string(shown)), " ")
	}
	return hex.EncodeToString(shown[:min(len(shown), 32)])
}
