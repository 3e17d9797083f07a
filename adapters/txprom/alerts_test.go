package txprom_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/textparse"
	promvalue "github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/template"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/txmsg/txmsg/adapters/outbox"
	txprom "github.com/txmsg/txmsg/adapters/txprom"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// alertRule is one alerting rule of docs/alerts.yml, as Prometheus parsed
// and validated it.
type alertRule struct {
	rulefmt.Rule
	expr parser.Expr
}

// loadAlertRules parses docs/alerts.yml with Prometheus's own rule-file
// parser, which also parses every expression and annotation template,
// and fails t on any error it reports.
func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join(docsDir, "alerts.yml"), false, model.LegacyValidation)
	require.Empty(t, errs, "docs/alerts.yml: Prometheus refuses the rule file")
	var out []alertRule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: docs/alerts.yml holds alerting rules only (%q)", g.Name, r.Record)
			expr, err := parser.ParseExpr(r.Expr)
			require.NoError(t, err, r.Alert)
			out = append(out, alertRule{Rule: r, expr: expr})
		}
	}
	require.NotEmpty(t, out)
	return out
}

// TestAlertRulesParse checks docs/alerts.yml with Prometheus's rule-file
// parser (rulefmt, as `promtool check rules` does): every group and rule
// validates, every expression parses and every annotation template
// parses. It needs no services.
func TestAlertRulesParse(t *testing.T) {
	t.Parallel()
	rules := loadAlertRules(t)
	names := map[string]bool{}
	for _, r := range rules {
		require.False(t, names[r.Alert], "%s is defined once", r.Alert)
		names[r.Alert] = true
		require.Equal(t, parser.ValueTypeVector, r.expr.Type(), "%s: an alert's expression is an instant vector", r.Alert)
		require.NotEmpty(t, r.Labels["severity"], "%s has a severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s has a summary", r.Alert)
	}
}

// sample is one scraped float sample.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

// scrapeStore holds the samples of the scrapes of one /metrics endpoint,
// stamped with each scrape's time as Prometheus stores them (a series
// missing from a scrape gets a staleness marker), and is the
// storage.Queryable the PromQL engine reads.
type scrapeStore struct {
	mu     sync.Mutex
	series map[string]*scrapedSeries
	last   map[string]bool
}

type scrapedSeries struct {
	lset    labels.Labels
	samples []chunks.Sample
}

func newScrapeStore() *scrapeStore {
	return &scrapeStore{series: map[string]*scrapedSeries{}, last: map[string]bool{}}
}

// scrapeClient bounds a scrape as Prometheus's scrape_timeout does.
var scrapeClient = &http.Client{Timeout: 10 * time.Second}

// scrape fetches url once and appends its samples at the scrape's start
// time, which it returns. The text is parsed by Prometheus's own parser.
func (s *scrapeStore) scrape(t *testing.T, url string) time.Time {
	t.Helper()
	at := time.Now()
	resp, err := scrapeClient.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)
	ts := at.UnixMilli()

	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "parse the scrape of %s", url)
		if e != textparse.EntrySeries {
			continue
		}
		_, _, v := p.Series()
		var lset labels.Labels
		p.Labels(&lset)
		key := lset.String()
		require.False(t, seen[key], "%s appears twice in one scrape", key)
		seen[key] = true
		ser := s.series[key]
		if ser == nil {
			ser = &scrapedSeries{lset: lset}
			s.series[key] = ser
		}
		ser.samples = append(ser.samples, sample{t: ts, f: v})
	}
	for key := range s.last {
		if !seen[key] {
			ser := s.series[key]
			ser.samples = append(ser.samples, sample{t: ts, f: math.Float64frombits(promvalue.StaleNaN)})
		}
	}
	s.last = seen
	return at
}

// Querier implements storage.Queryable.
func (s *scrapeStore) Querier(_, _ int64) (storage.Querier, error) { return storeQuerier{s}, nil }

type storeQuerier struct{ s *scrapeStore }

func (q storeQuerier) Select(_ context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	var out []storage.Series
series:
	for _, ser := range q.s.series {
		for _, m := range ms {
			if !m.Matches(ser.lset.Get(m.Name)) {
				continue series
			}
		}
		var in []chunks.Sample
		for _, smp := range ser.samples {
			if hints == nil || (smp.T() >= hints.Start && smp.T() <= hints.End) {
				in = append(in, smp)
			}
		}
		out = append(out, storage.NewListSeries(ser.lset, in))
	}
	if sortSeries {
		sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
	}
	return &seriesSet{list: out, i: -1}
}

func (q storeQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, errors.New("not implemented")
}

func (q storeQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, errors.New("not implemented")
}

func (q storeQuerier) Close() error { return nil }

type seriesSet struct {
	list []storage.Series
	i    int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.list) }
func (s *seriesSet) At() storage.Series                { return s.list[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// alertEval evaluates docs/alerts.yml's rules over a scrapeStore with the
// PromQL engine, the way Prometheus's rule manager does at one
// evaluation: each sample of a rule's result is an alert with the
// sample's labels, and its annotations are expanded with Prometheus's
// template engine.
//
// `for:` is not waited out: an alert counts as firing from the first
// evaluation that returns it (Prometheus would hold it pending that
// long). The test drives each incident for seconds, not minutes.
type alertEval struct {
	rules  []alertRule
	engine *promql.Engine
	store  *scrapeStore
}

func newAlertEval(t *testing.T, store *scrapeStore) *alertEval {
	return &alertEval{
		rules:  loadAlertRules(t),
		engine: promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: 30 * time.Second, LookbackDelta: 5 * time.Minute}),
		store:  store,
	}
}

func (e *alertEval) query(t *testing.T, expr string, at time.Time) promql.Vector {
	t.Helper()
	ctx := context.Background()
	q, err := e.engine.NewInstantQuery(ctx, e.store, nil, expr, at)
	require.NoError(t, err, expr)
	defer q.Close()
	res := q.Exec(ctx)
	require.NoError(t, res.Err, expr)
	v, err := res.Vector()
	require.NoError(t, err, expr)
	return v
}

// firing evaluates every rule at at and returns the alerts, each as
// AlertName{label="value", ...} with the labels of the rule's result,
// sorted. It fails t when an annotation of a returned alert does
// not expand.
func (e *alertEval) firing(t *testing.T, at time.Time) []string {
	t.Helper()
	var out []string
	for _, r := range e.rules {
		for _, smp := range e.query(t, r.Expr, at) {
			alert := labels.NewBuilder(smp.Metric).Del(labels.MetricName).Labels()
			data := template.AlertTemplateData(alert.Map(), nil, "", smp)
			for name, text := range r.Annotations {
				defs := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
				exp := template.NewTemplateExpander(context.Background(), defs+text, "__alert_"+r.Alert, data,
					model.TimeFromUnixNano(at.UnixNano()), nil, nil, []string{"missingkey=error"})
				got, err := exp.Expand()
				require.NoError(t, err, "%s: annotation %s does not expand for %s", r.Alert, name, alert)
				require.NotContains(t, got, "<no value>", "%s: annotation %s", r.Alert, name)
			}
			out = append(out, r.Alert+alert.String())
		}
	}
	sort.Strings(out)
	return out
}

// requireSeries fails t unless every series selector of every rule
// selects at least one series at at: a rule that returns nothing then
// does so because the value is healthy, not because the series is
// missing.
func (e *alertEval) requireSeries(t *testing.T, at time.Time) {
	t.Helper()
	for _, r := range e.rules {
		parser.Inspect(r.expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				require.NotEmpty(t, e.query(t, vs.String(), at), "%s: no series %s in the scrapes", r.Alert, vs)
			}
			return nil
		})
	}
}

// alertNames returns the alert names of firing's result.
func alertNames(firing []string) []string {
	var out []string
	for _, a := range firing {
		name, _, _ := strings.Cut(a, "{")
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// alertProc is one process of a txmsg service against the real broker and
// database: every kind of component declared in its txprom Metrics, none
// running until an incident starts it, its registry served over HTTP by
// promhttp, and the scrapes of that endpoint.
type alertProc struct {
	ctx   context.Context
	log   *slog.Logger
	db    *gorm.DB
	topic string
	conn  txrmq.Conn
	m     *txprom.Metrics
	reg   *prom.Registry
	url   string
	store *scrapeStore
	eval  *alertEval

	chk *checker.Checker
	pg  string // the transactional producer's group
	tr  *txrmq.Transactional
	// sweeper is the sweeper's group.
	sweeper string
	// ob writes the outbox; the collector reads it through statsProxy,
	// which the test can cut.
	ob         *outbox.Outbox
	statsProxy *testbed.Proxy
	relay      string
	cg         string // the consumer's group
	inbox      *txmsg.Inbox

	last time.Time // the last scrape
	// fired records the alerts expectAlerts saw fire, across the
	// subtests.
	fired *sync.Map
}

// maxBody is the producers' MaxBodySize: twice the broker's
// maxMessageSize, so that an oversized message reaches the broker, which
// refuses it.
const maxBody = 2 * txmsg.DefaultMaxBodySize

func newAlertProc(t *testing.T, fired *sync.Map) *alertProc {
	t.Helper()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelError}))
	db, dsn := testbed.DBWithDSN(t)
	p := &alertProc{ctx: ctx, log: log, db: db, topic: testbed.Topic(t), store: newScrapeStore(), fired: fired,
		conn: txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}}
	p.eval = newAlertEval(t, p.store)
	p.reg = prom.NewRegistry()
	p.m = txprom.New(txprom.Config{ConstLabels: constLabels})
	p.reg.MustRegister(p.m)

	var err error
	p.chk, err = checker.New(db, checker.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, p.chk.Migrate(ctx))
	p.pg = testbed.Name(t, "pg")
	p.tr, err = txrmq.NewTransactional(db, p.chk, txrmq.TransactionalConfig{
		Conn: p.conn, Group: p.pg, Hooks: txmsg.Hooks{p.m}, Topics: []string{p.topic}, MaxBodySize: maxBody,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.tr.Close(context.Background()) })
	p.m.AddTransactional(p.pg, p.topic)
	txprom.WatchCheckBackCache(p.m, p.pg, p.tr.CheckBackCacheStats)
	p.sweeper = testbed.Name(t, "sweeper")
	p.m.AddSweeper(p.sweeper, p.topic)

	p.ob, err = outbox.New(db, outbox.Config{Logger: log, Hooks: txmsg.Hooks{p.m}, MaxBodySize: maxBody})
	require.NoError(t, err)
	require.NoError(t, p.ob.Migrate(ctx))
	p.m.AddOutbox(p.topic)
	var statsDB *gorm.DB
	p.statsProxy, statsDB = testbed.ProxiedDB(t, dsn)
	statsOutbox, err := outbox.New(statsDB, outbox.Config{Logger: log})
	require.NoError(t, err)
	oc, err := txprom.NewOutboxCollector(statsOutbox.Stats, txprom.OutboxConfig{Table: p.ob.Table(), Metrics: p.m, Timeout: time.Second})
	require.NoError(t, err)
	p.reg.MustRegister(oc)
	p.relay = testbed.Name(t, "relay")
	p.m.AddRelay(p.relay, p.ob.Table())

	p.inbox, err = txmsg.NewInbox(db, txmsg.InboxConfig{Logger: log, Hooks: txmsg.Hooks{p.m}})
	require.NoError(t, err)
	require.NoError(t, p.inbox.Migrate(ctx))
	p.cg = testbed.Name(t, "cg")
	p.m.AddConsumer(p.cg, p.topic)

	srv := httptest.NewServer(promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	p.url = srv.URL + "/metrics"
	return p
}

// scrapeInterval is the time between two scrapes of the test.
const scrapeInterval = 250 * time.Millisecond

// scrapes scrapes the endpoint n times, scrapeInterval apart.
func (p *alertProc) scrapes(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if i > 0 {
			time.Sleep(scrapeInterval)
		}
		p.last = p.store.scrape(t, p.url)
	}
}

// healthy scrapes the endpoint a few times and checks that every series
// the rules select exists and that no alert fires.
func (p *alertProc) healthy(t *testing.T) {
	t.Helper()
	p.scrapes(t, 3)
	p.eval.requireSeries(t, p.last)
	require.Empty(t, p.eval.firing(t, p.last), "no alert fires while the service is healthy")
}

// alertWant maps the name of each alert an incident must fire to label
// values it must carry.
type alertWant = map[string]map[string]string

// expectAlerts scrapes until the alerts named in want fire (60 s at
// most), then checks that they, and no other, fire, each with the label
// values want gives it (those of the component the incident hit).
func (p *alertProc) expectAlerts(t *testing.T, want alertWant) {
	t.Helper()
	names := slices.Sorted(maps.Keys(want))
	deadline := time.Now().Add(60 * time.Second)
	var got []string
	for {
		p.scrapes(t, 1)
		got = p.eval.firing(t, p.last)
		if slices.Equal(alertNames(got), names) || time.Now().After(deadline) {
			break
		}
		time.Sleep(scrapeInterval)
	}
	// Two more scrapes: what fires stays the same.
	p.scrapes(t, 2)
	got = p.eval.firing(t, p.last)
	require.Equal(t, names, alertNames(got), "the alerts that fire: %v", got)
	for _, a := range got {
		name, _, _ := strings.Cut(a, "{")
		for k, v := range want[name] {
			require.Contains(t, a, fmt.Sprintf("%s=%q", k, v), "%s is about the component of the incident", a)
		}
		p.fired.Store(name, true)
	}
}

// startRelay runs an outbox relay named p.relay over a publisher whose
// name server is nameServer.
func (p *alertProc) startRelay(t *testing.T, nameServer string, maxAttempts int) {
	t.Helper()
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{
		Conn: txrmq.Conn{NameServers: []string{nameServer}, Logger: p.log}, Group: testbed.Name(t, "relaypub"),
		SendTimeout: 2 * time.Second, Retries: 1, MaxBodySize: maxBody,
	})
	require.NoError(t, err)
	require.NoError(t, pub.Start(p.ctx))
	relay, err := outbox.NewRelay(p.ob, pub, outbox.RelayConfig{
		Logger: p.log, Hooks: txmsg.Hooks{p.m}, Name: p.relay, MaxAttempts: maxAttempts,
		PollInterval: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(p.ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done; _ = pub.Close(context.Background()) })
}

// startConsumer runs a consumer of group p.cg on p.topic whose handler
// returns handle's error.
func (p *alertProc) startConsumer(t *testing.T, handle func() error) {
	t.Helper()
	cons, err := txrmq.NewConsumer(p.inbox, []txmsg.Route{txmsg.Handle(txmsg.Topic[event]{Name: p.topic},
		func(context.Context, *gorm.DB, txmsg.Delivery[event]) error { return handle() })},
		txrmq.ConsumerConfig{Conn: p.conn, Group: p.cg})
	require.NoError(t, err)
	require.NoError(t, cons.Start(p.ctx))
	t.Cleanup(func() { _ = cons.Close(context.Background()) })
}

// publish sends body to p.topic as a plain message.
func (p *alertProc) publish(t *testing.T, body []byte) string {
	t.Helper()
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: p.conn, Group: testbed.Name(t, "plain")})
	require.NoError(t, err)
	require.NoError(t, pub.Start(p.ctx))
	defer func() { _ = pub.Close(context.Background()) }()
	id := txmsg.NewID()
	require.NoError(t, pub.Publish(p.ctx, &txmsg.Message{ID: id, Topic: p.topic, Body: body}))
	return id
}

// oversized returns a body the broker refuses: above its maxMessageSize
// (4 MiB), random so that the client cannot compress it below.
func oversized() []byte {
	b := make([]byte, txmsg.DefaultMaxBodySize+1024)
	_, _ = rand.Read(b)
	return b
}

var noop = func(context.Context, *gorm.DB) error { return nil }

// TestAlertRulesFireOnIncidents evaluates docs/alerts.yml with
// Prometheus's PromQL engine over the live /metrics of real txmsg
// components, against the real broker and database. Each subtest is one
// process: scraped healthy first (every series the rules read exists,
// no alert), then driven into one incident and scraped again until the
// alert meant for it fires; then exactly the alerts of that incident
// fire, for the component it hit. `for:` is not waited out (see
// alertEval), and the samples are seconds apart: a rule's rate or
// increase window holds the scrapes of the whole subtest.
func TestAlertRulesFireOnIncidents(t *testing.T) {
	t.Parallel()
	testbed.RequireBroker(t)
	// Every rule of docs/alerts.yml has an incident below that fires it
	// (checked when every incident ran).
	fired := &sync.Map{}
	var defined, ran atomic.Int32
	run := func(name string, f func(t *testing.T)) {
		defined.Add(1)
		t.Run(name, func(t *testing.T) {
			ran.Add(1)
			t.Parallel()
			f(t)
		})
	}
	t.Cleanup(func() {
		if t.Failed() || t.Skipped() || ran.Load() != defined.Load() {
			return
		}
		for _, r := range loadAlertRules(t) {
			_, ok := fired.Load(r.Alert)
			assert.True(t, ok, "%s fired in no incident: add one to TestAlertRulesFireOnIncidents", r.Alert)
		}
	})

	run("HealthyTraffic", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		// Both modes deliver events that a consumer handles, and a
		// check-back of a committed transaction is answered from the cache.
		require.NoError(t, p.tr.Start(p.ctx))
		p.startRelay(t, testbed.NameServer(), 0)
		p.startConsumer(t, func() error { return nil })
		producer, err := txmsg.NewProducer(p.tr, txmsg.Topic[event]{Name: p.topic})
		require.NoError(t, err)
		committed, err := producer.Send(p.ctx, event{N: 1}, noop)
		require.NoError(t, err)
		local, err := txmsg.NewProducer(p.ob, txmsg.Topic[event]{Name: p.topic})
		require.NoError(t, err)
		_, err = local.Send(p.ctx, event{N: 2}, noop)
		require.NoError(t, err)
		_, err = p.tr.ResolveCheckBack(p.ctx, committed.ID, committed.BrokerMessageID)
		require.NoError(t, err)
		require.Equal(t, 1.0, value(t, p.reg, "txmsg_checkback_cache_lookups_total", "group", p.pg, "result", "hit"))
		require.Eventually(t, func() bool {
			return value(t, p.reg, "txmsg_consumer_messages_total", "group", p.cg, "topic", p.topic, "result", "handled") == 2 &&
				value(t, p.reg, "txmsg_outbox_rows", "table", p.ob.Table(), "status", "sent") == 1
		}, 60*time.Second, 50*time.Millisecond, "both events are relayed and handled")
		p.scrapes(t, 3)
		p.eval.requireSeries(t, p.last)
		require.Empty(t, p.eval.firing(t, p.last), "no alert fires for healthy traffic")
	})

	run("ConsumerHandlerFails", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		p.startConsumer(t, func() error { return errors.New("handler fails on every message") })
		p.publish(t, []byte(`{"n":1}`))
		p.expectAlerts(t, alertWant{"TxmsgConsumerErrors": {"group": p.cg, "topic": p.topic}})
	})

	run("ConsumerParks", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		p.startConsumer(t, func() error { return nil })
		p.publish(t, []byte(`not json`))
		p.expectAlerts(t, alertWant{"TxmsgConsumerParked": {"group": p.cg, "topic": p.topic}})
	})

	run("RelayBrokerUnreachable", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		p.startRelay(t, "127.0.0.1:1", 0)
		_, err := p.ob.Transact(p.ctx, &txmsg.Message{Topic: p.topic, Body: []byte(`{"n":1}`)}, noop)
		require.NoError(t, err)
		p.expectAlerts(t, alertWant{"TxmsgRelayBrokerUnavailable": {"relay": p.relay, "table": p.ob.Table()}})
	})

	run("RelayRefusedAndParked", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		p.startRelay(t, testbed.NameServer(), 1)
		_, err := p.ob.Transact(p.ctx, &txmsg.Message{Topic: p.topic, Body: oversized()}, noop)
		require.NoError(t, err)
		p.expectAlerts(t, alertWant{"TxmsgOutboxParked": {"table": p.ob.Table()}, "TxmsgRelayPublishErrors": {"relay": p.relay, "table": p.ob.Table()}})
	})

	run("OutboxBacklog", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		// No relay runs; the pending row is made 10 minutes old, past the
		// rule's 5 minutes.
		_, err := p.ob.Transact(p.ctx, &txmsg.Message{Topic: p.topic, Body: []byte(`{"n":1}`)}, noop)
		require.NoError(t, err)
		require.NoError(t, p.db.Exec("UPDATE "+p.ob.Table()+" SET created_at = created_at - INTERVAL 10 MINUTE").Error)
		p.expectAlerts(t, alertWant{"TxmsgOutboxBacklog": {"table": p.ob.Table()}})
	})

	run("OutboxStatsFail", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		p.statsProxy.Cut()
		p.expectAlerts(t, alertWant{"TxmsgOutboxStatsDown": {"table": p.ob.Table()}})
	})

	run("InvalidSends", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		_, err := p.tr.Transact(p.ctx, &txmsg.Message{Topic: p.topic}, noop)
		require.ErrorIs(t, err, txmsg.ErrInvalidMessage)
		p.expectAlerts(t, alertWant{"TxmsgInvalidSends": {"topic": p.topic}})
	})

	run("HalfSendRefused", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		require.NoError(t, p.tr.Start(p.ctx))
		_, err := p.tr.Transact(p.ctx, &txmsg.Message{Topic: p.topic, Body: oversized()}, noop)
		require.Error(t, err)
		require.NotErrorIs(t, err, txmsg.ErrInvalidMessage)
		p.expectAlerts(t, alertWant{"TxmsgHalfSendErrors": {"topic": p.topic}})
	})

	run("CheckBackUnknown", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		require.NoError(t, p.tr.Start(p.ctx))
		// A local transaction still running when the broker checks back:
		// the producer answers UNKNOWN.
		_, err := p.tr.Transact(p.ctx, &txmsg.Message{Topic: p.topic, Body: []byte(`{"n":1}`)}, func(context.Context, *gorm.DB) error {
			deadline := time.Now().Add(30 * time.Second)
			for value(t, p.reg, "txmsg_checkbacks_total", "group", p.pg, "topic", p.topic, "result", "unknown") < 1 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			return nil
		})
		require.NoError(t, err)
		p.expectAlerts(t, alertWant{"TxmsgCheckBackUnknown": {"group": p.pg, "topic": p.topic}})
	})

	run("SweeperHolds", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		require.NoError(t, p.tr.Start(p.ctx))
		pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: p.conn, Group: testbed.Name(t, "sweeppub")})
		require.NoError(t, err)
		require.NoError(t, pub.Start(p.ctx))
		t.Cleanup(func() { _ = pub.Close(context.Background()) })
		sw, err := txrmq.NewSweeper(p.chk, pub, txrmq.SweeperConfig{
			Conn: p.conn, Group: p.sweeper, Hooks: txmsg.Hooks{p.m}, ProducerGroups: []string{p.pg},
			HoldFor: time.Second, RetryDelayLevel: 1, Parked: p.inbox,
		})
		require.NoError(t, err)
		require.NoError(t, sw.Start(p.ctx))
		t.Cleanup(func() { _ = sw.Close(context.Background()) })
		purger, err := checker.New(p.db, checker.Config{Logger: p.log, CheckWindow: time.Second})
		require.NoError(t, err)

		// A local transaction outlives the broker's check-backs (5 on the
		// test bed), which the producer answers UNKNOWN, so the broker
		// discards its half message to the sweeper. A purge runs in the
		// meantime, and the transaction then rolls back: the barrier has
		// no row for it, and a purge horizon after its start, so whether
		// it committed cannot be known and the sweeper holds it.
		_, err = p.tr.Transact(p.ctx, &txmsg.Message{Topic: p.topic, Body: []byte(`{"n":1}`)}, func(ctx context.Context, _ *gorm.DB) error {
			deadline := time.Now().Add(60 * time.Second)
			for value(t, p.reg, "txmsg_checkbacks_total", "group", p.pg, "topic", p.topic, "result", "unknown") < 5 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			purged := make(chan error, 1)
			go func() { _, err := purger.Purge(context.WithoutCancel(ctx), time.Second, 0); purged <- err }()
			t.Cleanup(func() { require.NoError(t, <-purged) })
			for time.Now().Before(deadline) {
				if h, err := p.chk.Horizon(ctx); err == nil && !h.IsZero() {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			return errors.New("the local transaction fails after the broker gave up on it")
		})
		require.Error(t, err)
		require.Eventually(t, func() bool {
			return value(t, p.reg, "txmsg_sweeper_held_total", "group", p.sweeper, "topic", p.topic) >= 1
		}, 60*time.Second, 100*time.Millisecond, "the sweeper holds the discarded half message")
		p.expectAlerts(t, alertWant{"TxmsgCheckBackUnknown": {"group": p.pg, "topic": p.topic}, "TxmsgSweeperHeld": {"group": p.sweeper, "topic": p.topic}})
	})

	run("CheckBacksMissTheCache", func(t *testing.T) {
		p := newAlertProc(t, fired)
		p.healthy(t)
		// Check-backs for transactions this process did not run (another
		// replica's, or from before a restart): each misses the outcome
		// cache and asks the barrier. The rule ignores less than one miss
		// a second over its window.
		const n = 1200
		ids := make(chan string, n)
		for range n {
			ids <- txmsg.NewID()
		}
		close(ids)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ids {
					_, err := p.tr.ResolveCheckBack(p.ctx, id, "")
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		p.expectAlerts(t, alertWant{"TxmsgCheckBackCacheMissing": {"group": p.pg}})
	})
}
