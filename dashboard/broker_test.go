package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/dashboard/internal/dashtest"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/internal/testbed/rmqproc"
	"github.com/txmsg/txmsg/txmsg"
)

// TestRequeueAndReplayReachTheBroker: a parked row requeued through the
// dashboard is published by the relay and arrives on the real broker with
// its txmsg ID; a parked message replayed through it is delivered again
// to the group that parked it alone and handled by its inbox.
func TestRequeueAndReplayReachTheBroker(t *testing.T) {
	t.Parallel()
	const token = "tok-71aa02c9d3e4"
	b := dashtest.New(t, dashtest.Options{Broker: true, Token: token, AllowActions: true})
	dead := b.ParkedRow("order-41", dashtest.Body(dashtest.Event{Order: "o-41", Qty: 2}), "send: timeout")
	parked := b.Parked(b.Group, "order-42", dashtest.Body(dashtest.Event{Order: "o-42", Qty: 5}), "decoder v1 rejected qty")
	c := client(t)
	csrf := login(t, b, c, token)

	res := do(t, c, "POST", b.URL+"outbox/requeue", url.Values{"id": {dead}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	b.Observer.Delivered(t, dead)
	require.Equal(t, `{"order":"o-41","qty":2}`, string(b.Observer.First(dead).Body))
	require.Eventually(t, func() bool { return b.Status(dead) == outbox.StatusSent }, time.Minute, 100*time.Millisecond)

	res = do(t, c, "POST", b.URL+"consumers/replay", url.Values{"id": {parked}, "group": {b.Group}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Contains(t, get(t, c, b.Server.URL+res.header.Get("Location")).body, "Replayed 1 message(s)")
	require.True(t, b.WaitHandled(b.Group, parked, 90*time.Second), "the consumer's inbox never handled the replayed message")
	// The replay went to the parking group's retry topic: the observer,
	// another group subscribed to the topic, never receives it.
	b.Observer.NeverDelivered(t, parked, 3*time.Second)
	_, err := b.Inbox.ParkedMessage(context.Background(), b.Group, parked)
	require.ErrorIs(t, err, txmsg.ErrNotParked)
	// Replaying it again finds nothing to replay.
	res = do(t, c, "POST", b.URL+"consumers/replay", url.Values{"id": {parked}, "group": {b.Group}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusNotFound, res.status)

	logs := b.Logs.String()
	require.Contains(t, logs, `"action":"consumer.replay"`)
	require.Contains(t, logs, `"who":"alice@`)
}

// nameCell is a name cell: its text may hold <wbr> break points.
const nameCell = `<td class="name"[^>]*>(?:[^<]|<wbr>)*</td>`

var lagCell = regexp.MustCompile(`data-group="([^"]+)">\s*` + nameCell + `<td class="n">[^<]*</td><td class="n">[^<]*</td>\s*` + nameCell + `\s*<td class="n lag[^"]*">(\d+)`)

var brokerGroupRow = regexp.MustCompile(`(?s)<tr data-broker-group="[^"]+".*?</tr>`)

// brokerGroupRowOf returns the row of broker group name on the broker
// page, or "".
func brokerGroupRowOf(page, name string) string {
	return regexp.MustCompile(`(?s)<tr data-broker-group="` + regexp.QuoteMeta(name) + `".*?</tr>`).FindString(page)
}

// TestBrokerPageShowsABrokenReplica: on the HA form (make test-ha, its
// asynchronous form: the page reads the same on the others), the broker
// page shows broker-a's group healthy with its slave;
// in amber with "does not answer" while the slave is frozen (SIGSTOP);
// in amber with "no slave" once it is killed (it leaves the name
// server); and healthy again after it is started.
func TestBrokerPageShowsABrokenReplica(t *testing.T) {
	ha := testbed.RequireHA(t)
	ha.RequireReplication(t, rmqproc.ReplicationAsync, "one form is enough: a frozen or dead slave reads the same on the page whatever the replication")
	group := ha.Masters[0].Name
	b := dashtest.New(t, dashtest.Options{Broker: true})
	c := client(t)
	t.Cleanup(func() { ha.Restore(t) })
	var last string
	showing := func(want ...string) func() bool {
		return func() bool {
			page := get(t, c, b.URL+"broker")
			require.Equal(t, http.StatusOK, page.status, page.body)
			last = brokerGroupRowOf(page.body, group)
			for _, w := range want {
				if !strings.Contains(last, w) {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, showing(`class="group ok"`, ha.Procs.SlaveAddr(group)), 90*time.Second, time.Second,
		"the broker page never showed %s healthy with its slave; last row:\n%s", group, last)

	slave := ha.Procs.SlaveOf(group)
	ha.Pause(t, slave)
	require.Eventually(t, showing(`class="group warn"`, "does not answer"), 60*time.Second, time.Second,
		"a frozen slave not shown; last row:\n%s", last)
	ha.Resume(t, slave)
	ha.Kill(t, slave)
	require.Eventually(t, showing(`class="group warn"`, "no slave"), 60*time.Second, time.Second,
		"a dead slave not shown; last row:\n%s", last)
	ha.Start(t, slave)
	require.Eventually(t, showing(`class="group ok"`), 90*time.Second, time.Second,
		"the group not healthy again after the slave's start; last row:\n%s", last)
}

// TestBrokerPageAndLookupOnTheBroker: the broker page reports the bed's
// consumer group on its topic with a lag that drops to zero once the
// consumer caught up, and the size of TRANS_CHECK_MAX_TIME_TOPIC (or its
// absence); a lookup by message key finds the message on the broker.
func TestBrokerPageAndLookupOnTheBroker(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Broker: true})
	id := b.PendingRow("order-77", dashtest.Event{Order: "o-77", Qty: 1})
	b.Observer.Delivered(t, id)
	require.True(t, b.WaitHandled(b.Group, id, 90*time.Second))
	c := client(t)

	require.Eventually(t, func() bool {
		page := get(t, c, b.URL+"broker")
		require.Equal(t, http.StatusOK, page.status, page.body)
		require.Contains(t, page.body, "TRANS_CHECK_MAX_TIME_TOPIC")
		for _, m := range lagCell.FindAllStringSubmatch(page.body, -1) {
			if m[1] == b.Group {
				return m[2] == "0"
			}
		}
		return false
	}, 90*time.Second, time.Second, "the broker page never showed group %s caught up on %s", b.Group, b.Topic)

	page := get(t, c, b.URL+"broker")
	require.Contains(t, page.body, b.Topic)
	require.True(t, strings.Contains(page.body, `id="checkmax-size"`) || strings.Contains(page.body, "The topic does not exist"))
	// The one broker as a group of a master alone, healthy.
	group := brokerGroupRow.FindString(page.body)
	require.NotEmpty(t, group, "no broker group on the broker page:\n%s", page.body)
	require.Contains(t, group, testbed.Broker())
	require.Contains(t, group, `class="group ok"`)

	// By key and by ID, the broker's index answers (it may lag the store a
	// little).
	require.Eventually(t, func() bool {
		tx := get(t, c, b.URL+"tx?q=order-77")
		return tx.status == http.StatusOK && strings.Contains(tx.body, `<td class="mono">`+id+`</td>`)
	}, 60*time.Second, time.Second)
	// The relay marks the row sent after the broker's answer, which may
	// come after the consumer handled the message.
	var tx response
	require.Eventually(t, func() bool {
		tx = get(t, c, b.URL+"tx?q="+id)
		return strings.Contains(tx.body, `class="st sent"`)
	}, 30*time.Second, 200*time.Millisecond, "the transaction page shows the outbox row of %s sent", id)
	require.Contains(t, tx.body, "handled by <b>"+b.Group+"</b>")
}

// TestBrokerPageCountsMessages: the broker page reads the topic's route
// (4 queues on the test broker) and sums the queues' offsets into the
// number of messages stored.
func TestBrokerPageCountsMessages(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Broker: true})
	for i := range 5 {
		b.PendingRow("lag-"+strconv.Itoa(i), dashtest.Event{Order: "lag", Qty: i})
	}
	c := client(t)
	require.Eventually(t, func() bool {
		page := get(t, c, b.URL+"broker")
		re := regexp.MustCompile(`title="` + regexp.QuoteMeta(b.Topic) + `">(?:[^<]|<wbr>)*</td><td class="n">(\d+)</td><td class="n">(\d+)</td>`)
		m := re.FindStringSubmatch(page.body)
		return m != nil && m[1] == "4" && m[2] == "5"
	}, 60*time.Second, time.Second, "the broker page never counted 5 messages on 4 queues")
}

// relayRow is the overview's row of one relay: name, buckets, lease end,
// last lease round.
var relayRow = regexp.MustCompile(`<tr class="relay" data-relay="([^"]+)">` + nameCell + `<td>(\d+):[^<]*</td><td>[^<]*</td><td>(.*?)</td></tr>`)

// TestOverviewShowsTheRelays: the overview lists the bed's running relay
// with every bucket of the outbox and its last lease round from the relay
// table.
func TestOverviewShowsTheRelays(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Broker: true})
	c := client(t)
	var m []string
	require.Eventually(t, func() bool {
		page := get(t, c, b.URL)
		require.Equal(t, http.StatusOK, page.status, page.body)
		m = nil
		for _, row := range relayRow.FindAllStringSubmatch(page.body, -1) {
			if row[1] == b.Relay && row[2] == "8" {
				m = row
			}
		}
		return m != nil
	}, 60*time.Second, 200*time.Millisecond, "the overview never showed relay %s with the 8 buckets", b.Relay)
	require.NotEmpty(t, m[3], "no last lease round")
	require.NotContains(t, m[3], "not in the relay table")
}

// groupRow returns group's row of the broker page's lag table, or "".
func groupRow(page, group string) string {
	m := regexp.MustCompile(`(?s)<tr data-topic="[^"]*" data-group="` + regexp.QuoteMeta(group) + `">.*?</tr>`).FindString(page)
	return m
}

// TestBrokerPageShowsGroupsOnline: the broker page says whether each
// consumer group has a consumer connected to the broker: the bed's
// running consumer is online; a second group that consumed the topic,
// committed its offsets and stopped is offline, its committed offsets
// still listed.
func TestBrokerPageShowsGroupsOnline(t *testing.T) {
	t.Parallel()
	b := dashtest.New(t, dashtest.Options{Broker: true})
	ctx := context.Background()
	other := testbed.Name(t, "dcg2")
	route := txmsg.Handle(txmsg.Topic[dashtest.Event]{Name: b.Topic}, func(ctx context.Context, tx *gorm.DB, d txmsg.Delivery[dashtest.Event]) error {
		return nil
	})
	cons, err := txrmq.NewConsumer(b.Inbox, []txmsg.Route{route}, txrmq.ConsumerConfig{
		Conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}}, Group: other, RetryDelayLevel: 1,
	})
	require.NoError(t, err)
	require.NoError(t, cons.Start(ctx))
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = cons.Close(context.Background())
		}
	})
	id := b.PendingRow("order-online", dashtest.Event{Order: "o-on", Qty: 1})
	require.True(t, b.WaitHandled(other, id, 90*time.Second), "group %s never handled %s", other, id)
	c := client(t)

	// Both groups online, and the second one's offsets committed.
	require.Eventually(t, func() bool {
		page := get(t, c, b.URL+"broker")
		mine, theirs := groupRow(page.body, b.Group), groupRow(page.body, other)
		return strings.Contains(mine, `class="consumers online"`) && strings.Contains(theirs, `class="consumers online"`) &&
			regexp.MustCompile(`<td class="n lag[^"]*">\d+</td>`).MatchString(theirs)
	}, 90*time.Second, time.Second, "the broker page never showed both groups online with offsets")

	require.NoError(t, cons.Close(ctx))
	closed = true
	var theirs string
	require.Eventually(t, func() bool {
		page := get(t, c, b.URL+"broker")
		theirs = groupRow(page.body, other)
		return strings.Contains(theirs, `class="consumers offline"`) &&
			strings.Contains(groupRow(page.body, b.Group), `class="consumers online"`)
	}, 90*time.Second, time.Second, "the broker page never showed group %s offline: %s", other, theirs)
}
