package txprom_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/txmsg/txmsg/adapters/outbox"
	txprom "github.com/txmsg/txmsg/adapters/txprom"
	"github.com/txmsg/txmsg/adapters/txrmq"
	"github.com/txmsg/txmsg/checker"
	"github.com/txmsg/txmsg/internal/testbed"
	"github.com/txmsg/txmsg/txmsg"
)

// docsDir is the repository's docs directory, seen from this package.
var docsDir = filepath.Join("..", "..", "docs")

// constLabels are the registries' constant labels in these tests; the
// checks below leave them out of the labels they compare.
var constLabels = prom.Labels{"service": "test"}

// declared builds, against the real broker and database, a registry with
// every kind of component declared and no event yet: a transactional
// producer and its check-back cache, a sweeper, an outbox with its
// collector and a relay, a consumer and a reconciler.
func declared(t *testing.T) *prom.Registry {
	t.Helper()
	testbed.RequireBroker(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testbed.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelError}))
	db := testbed.DB(t)
	topic := testbed.Topic(t)
	reg := prom.NewRegistry()
	m := txprom.New(txprom.Config{ConstLabels: constLabels})
	reg.MustRegister(m)
	conn := txrmq.Conn{NameServers: []string{testbed.NameServer()}, Logger: log}

	chk, err := checker.New(db, checker.Config{Logger: log})
	require.NoError(t, err)
	require.NoError(t, chk.Migrate(ctx))
	group := testbed.Name(t, "pg")
	tr, err := txrmq.NewTransactional(db, chk, txrmq.TransactionalConfig{Conn: conn, Group: group, Hooks: txmsg.Hooks{m}, Topics: []string{topic}})
	require.NoError(t, err)
	m.AddTransactional(group, topic)
	txprom.WatchCheckBackCache(m, group, tr.CheckBackCacheStats)
	m.AddSweeper(testbed.Name(t, "sweeper"), topic)

	ob, err := outbox.New(db, outbox.Config{Logger: log, Hooks: txmsg.Hooks{m}})
	require.NoError(t, err)
	require.NoError(t, ob.Migrate(ctx))
	m.AddOutbox(topic)
	oc, err := txprom.NewOutboxCollector(ob.Stats, txprom.OutboxConfig{Table: ob.Table(), Metrics: m})
	require.NoError(t, err)
	reg.MustRegister(oc)
	pub, err := txrmq.NewPublisher(txrmq.PublisherConfig{Conn: conn, Group: testbed.Name(t, "relay")})
	require.NoError(t, err)
	relay, err := outbox.NewRelay(ob, pub, outbox.RelayConfig{Logger: log, Hooks: txmsg.Hooks{m}})
	require.NoError(t, err)
	m.AddRelay(relay.Name(), ob.Table())

	m.AddConsumer(testbed.Name(t, "cg"), topic)
	m.AddReconciler("reconciler")
	return reg
}

// family is what a gathered metric family or a documented row says.
type family struct {
	typ    string
	labels map[string][]string // label name → values (sorted; empty when free)
}

// gathered returns reg's families by name, their label names and, for
// each, the values its series have, leaving out the constant labels.
func gathered(t *testing.T, reg prom.Gatherer) map[string]family {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{typ: strings.ToLower(mf.GetType().String()), labels: map[string][]string{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if _, ok := constLabels[lp.GetName()]; ok {
					require.Equal(t, constLabels[lp.GetName()], lp.GetValue(), "%s carries the constant labels", mf.GetName())
					continue
				}
				if !slices.Contains(f.labels[lp.GetName()], lp.GetValue()) {
					f.labels[lp.GetName()] = append(f.labels[lp.GetName()], lp.GetValue())
				}
			}
			require.Len(t, m.GetLabel(), len(f.labels)+len(constLabels), "%s: every series has every label", mf.GetName())
		}
		for _, v := range f.labels {
			sort.Strings(v)
		}
		out[mf.GetName()] = f
	}
	return out
}

var (
	docLabel = regexp.MustCompile("`([a-z_]+)`(?:\\s*\\(([^)]*)\\))?")
	docName  = regexp.MustCompile("^`(txmsg_[a-z_]+)`$")
)

// documented parses the metrics table of docs/operations.md: name, type,
// labels and, where the table lists them in parentheses, their values.
func documented(t *testing.T) map[string]family {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docsDir, "operations.md"))
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	start := slices.Index(lines, "| metric | type | labels | fed by |")
	require.NotEqual(t, -1, start, "docs/operations.md has the metrics table")
	out := map[string]family{}
	for _, line := range lines[start+2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(t, len(cells), 5, line)
		name := docName.FindStringSubmatch(strings.TrimSpace(cells[1]))
		require.NotNil(t, name, "a metric name in backquotes: %s", line)
		f := family{typ: strings.TrimSpace(cells[2]), labels: map[string][]string{}}
		for _, l := range docLabel.FindAllStringSubmatch(cells[3], -1) {
			var values []string
			if l[2] != "" {
				for _, v := range strings.Split(l[2], ",") {
					values = append(values, strings.TrimSpace(v))
				}
				sort.Strings(values)
			}
			f.labels[l[1]] = values
		}
		_, dup := out[name[1]]
		require.False(t, dup, "%s is documented once", name[1])
		out[name[1]] = f
	}
	return out
}

// TestOperationsMetricsTable checks the metrics table of
// docs/operations.md against what a registry with every component
// declared exports: the same names, types and labels, and the same values
// where the table lists them.
func TestOperationsMetricsTable(t *testing.T) {
	t.Parallel()
	got := gathered(t, declared(t))
	doc := documented(t)
	require.ElementsMatch(t, keys(doc), keys(got), "docs/operations.md's metrics table lists the registered metrics")
	for name, d := range doc {
		g := got[name]
		require.Equal(t, d.typ, g.typ, "%s's type", name)
		require.ElementsMatch(t, keys(d.labels), keys(g.labels), "%s's labels", name)
		for l, values := range d.labels {
			if values != nil {
				require.Equal(t, values, g.labels[l], "%s's %s values (documented, pre-created)", name, l)
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestAlertRulesMatchMetrics checks docs/alerts.yml, parsed by
// Prometheus (see loadAlertRules), against a registry with every
// component declared and no event yet: every metric a rule selects is
// registered, every label it matches on is one of that metric's, every
// series it selects exists (a counter at 0), every label it aggregates
// by is one of the metrics' it aggregates, and every $labels variable of
// its annotations is a label of its result.
func TestAlertRulesMatchMetrics(t *testing.T) {
	t.Parallel()
	reg := declared(t)
	got := gathered(t, reg)
	mfs, err := reg.Gather()
	require.NoError(t, err)

	rules := loadAlertRules(t)
	require.GreaterOrEqual(t, len(rules), 5)
	for _, r := range rules {
		var used []string
		parser.Inspect(r.expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			f, ok := got[vs.Name]
			require.True(t, ok, "%s: %s is not a registered metric", r.Alert, vs.Name)
			used = append(used, vs.Name)
			want := map[string]string{}
			for _, mt := range vs.LabelMatchers {
				if mt.Name == labels.MetricName {
					continue
				}
				_, known := f.labels[mt.Name]
				require.True(t, known, "%s: %s has no label %q", r.Alert, vs.Name, mt.Name)
				if mt.Type == labels.MatchEqual {
					require.Contains(t, f.labels[mt.Name], mt.Value, "%s: no %s series with %s=%q", r.Alert, vs.Name, mt.Name, mt.Value)
					want[mt.Name] = mt.Value
				}
			}
			require.True(t, seriesAtZero(mfs, vs.Name, want), "%s: %s exists (a counter at 0) before any event", r.Alert, vs)
			return nil
		})
		require.NotEmpty(t, used, "%s reads a txmsg metric", r.Alert)

		// Aggregations keep labels of the metrics they aggregate.
		parser.Inspect(r.expr, func(node parser.Node, _ []parser.Node) error {
			if agg, ok := node.(*parser.AggregateExpr); ok {
				have := resultLabels(agg.Expr, got)
				for _, l := range agg.Grouping {
					require.Contains(t, have, l, "%s: %s aggregates by %q, which the series it aggregates do not have", r.Alert, agg, l)
				}
			}
			return nil
		})
		out := resultLabels(r.expr, got)
		for name, text := range r.Annotations {
			for _, v := range templateVar.FindAllStringSubmatch(text, -1) {
				require.Contains(t, out, v[1], "%s: annotation %s uses $labels.%s, which the rule's result does not have", r.Alert, name, v[1])
			}
		}
	}
}

// templateVar matches a $labels variable of an annotation template.
var templateVar = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// resultLabels returns the label names (the constant ones left out) of
// the series expr returns, given the registered metrics' labels.
func resultLabels(expr parser.Expr, got map[string]family) []string {
	switch e := expr.(type) {
	case *parser.VectorSelector:
		return keys(got[e.Name].labels)
	case *parser.MatrixSelector:
		return resultLabels(e.VectorSelector, got)
	case *parser.ParenExpr:
		return resultLabels(e.Expr, got)
	case *parser.Call:
		for _, arg := range e.Args {
			if t := arg.Type(); t == parser.ValueTypeVector || t == parser.ValueTypeMatrix {
				return resultLabels(arg, got)
			}
		}
		return nil
	case *parser.AggregateExpr:
		if e.Without {
			return slices.DeleteFunc(resultLabels(e.Expr, got), func(l string) bool { return slices.Contains(e.Grouping, l) })
		}
		return e.Grouping
	case *parser.BinaryExpr:
		// Vector op scalar keeps the vector's labels; vector op vector the
		// left side's (without group_right, which the rules do not use).
		if e.LHS.Type() == parser.ValueTypeVector {
			return resultLabels(e.LHS, got)
		}
		return resultLabels(e.RHS, got)
	}
	return nil
}

// seriesAtZero reports whether name has a series with the labels want,
// at 0 when it is a counter.
func seriesAtZero(mfs []*dto.MetricFamily, name string, want map[string]string) bool {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return m.Counter == nil || m.Counter.GetValue() == 0
		}
	}
	return false
}
