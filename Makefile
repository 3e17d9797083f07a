# txmsg: make test starts the real broker and database it needs, then runs
# every test against them. See README.md.
SHELL := /bin/bash
GO ?= go
MODE ?= transactional
export TXMSG_NAMESRV ?= 127.0.0.1:9876
export TXMSG_BROKER ?= 127.0.0.1:10911
# The database: by default a MariaDB server of the test bed's own (scripts/mysql.sh: its own data
# directory under .cache/mysql/, port TXMSG_MYSQL_PORT), which no other server's state can change.
# TXMSG_DSN set in the environment or on the command line names a server of your own instead:
# scripts/mysql.sh is then never run, and internal/testbed/cmd/dbcheck checks that its user may
# create and drop txmsg_* databases (and prints the GRANT statements when it may not).
export TXMSG_MYSQL_PORT ?= 13306
ifeq ($(filter environment command line,$(origin TXMSG_DSN)),)
export TXMSG_DSN := txmsg:txmsg@tcp(127.0.0.1:$(TXMSG_MYSQL_PORT))/txmsg_test?parseTime=true&loc=UTC&charset=utf8mb4
MYSQL_UP = scripts/mysql.sh start
MYSQL_DOWN = scripts/mysql.sh stop
else
export TXMSG_DSN
MYSQL_UP = $(GO) run ./internal/testbed/cmd/dbcheck
MYSQL_DOWN = @echo "TXMSG_DSN names a server of your own; not stopping it"
endif

.PHONY: hygiene test test-defaults test-compat test-cluster test-broker-faults test-stock test-ha unit services-up services-down services-status vet fmt-check wire-check quickstart demo bench chaos

# Modules of their own, so that the core module requires neither Prometheus
# nor OpenTelemetry. They require a released version of the root module; the
# root go.work points that at this tree. `go test ./...` at the root does not
# match their packages (workspace mode or not); these targets run them with
# the same environment.
NESTED_MODULES := adapters/txprom adapters/txotel
in_nested = set -e; for m in $(NESTED_MODULES); do echo "(cd $$m && $(1))"; (cd $$m && $(1)); done

## test: start RocketMQ and MariaDB if needed, then run all tests with the race detector, then the
## test-defaults packages again on databases with the server's defaults, then the dashboard in a real
## browser (test-browser, which installs Chromium if needed); the chaos suite's short run
## goes last and alone, because it kills and restarts the broker and the database.
CHAOS_PKG := ./cmd/txchaos
test: services-up vet fmt-check hygiene wire-check
	TXMSG_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 25m $$($(GO) list ./... | grep -v -x -F "$$($(GO) list $(CHAOS_PKG))")
	@$(call in_nested,TXMSG_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 10m ./...)
	$(RUN_TEST_DEFAULTS)
	$(RUN_TEST_BROWSER)
	TXMSG_REQUIRE_SERVICES=1 TXMSG_CHAOS_INFRA=1 $(GO) test -race -count=1 -timeout 15m $(CHAOS_PKG)

## test-defaults: the packages that own or use txmsg's tables again, each test database created the
## way a DBA creates one (plain CREATE DATABASE: the server's default collation, e.g. utf8mb4_general_ci,
## and its default isolation level) instead of utf8mb4_bin. `make test` runs it too.
# Tests about memory, load and crashes, which no collation changes, skip themselves in this pass
# (testbed.SkipOnServerDefaults).
DEFAULTS_PKGS := ./checker/ ./txmsg/ ./adapters/outbox/ ./adapters/txrmq/ ./internal/... ./cmd/txmsgctl/ ./examples/...
RUN_TEST_DEFAULTS = TXMSG_TEST_DB_DEFAULTS=1 TXMSG_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 20m $(DEFAULTS_PKGS)
test-defaults: services-up
	$(RUN_TEST_DEFAULTS)

## test-browser: the dashboard in a real headless Chromium (installed by scripts/chromium.sh) against
## the real broker and database: dashboard/browsertest, a module of its own so that chromedp stays out
## of the core go.mod. It reaches the root module through a replace in its go.mod, so it runs with
## GOWORK=off, inside or outside a workspace.
BROWSER_MODULE := dashboard/browsertest
.PHONY: test-browser screenshots
RUN_TEST_BROWSER = scripts/chromium.sh && cd $(BROWSER_MODULE) && GOWORK=off TXMSG_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 10m ./...
test-browser: services-up
	$(RUN_TEST_BROWSER)

## screenshots: the browser test again, writing a PNG of every dashboard page into docs/img.
screenshots: services-up
	scripts/chromium.sh
	cd $(BROWSER_MODULE) && GOWORK=off TXMSG_REQUIRE_SERVICES=1 TXMSG_SCREENSHOTS=1 $(GO) test -count=1 -timeout 10m -v ./...

## test-compat: for each RocketMQ version of ROCKETMQ_COMPAT_VERSIONS (scripts/versions.env), one at a time:
## start it from Maven Central jars on ports of its own (name server 19876, broker 20911; the default-port
## broker is never touched), run the transactional and local-table conformance suites, the consumer tests and
## the sweeper test, stop it. COMPAT_SCOPE=conformance runs the conformance suites only; COMPAT_VERSIONS=4.9.7
## picks versions. 1-2 minutes per version. See docs/compatibility.md.
COMPAT_SCOPE ?= full
test-compat:
	$(MYSQL_UP)
	GO=$(GO) COMPAT_SCOPE=$(COMPAT_SCOPE) scripts/test-compat.sh

## test-cluster: the two-broker cluster tests (those of adapters/txrmq and adapters/outbox that call
## testbed.RequireCluster; with TXMSG_CLUSTER_NAMESRV set the packages' other tests skip): starts a RocketMQ cluster from Maven Central jars on ports of its own (name server 29876, broker-a 30911,
## broker-b 31911; scripts/rocketmq.sh start --cluster) from an empty store, runs the tests, which SIGKILL and
## restart the cluster's brokers, then stops the cluster. The default-port broker is started (the packages' TestMain
## checks it) and never touched otherwise. See docs/testing.md.
## Without -race: a broker that leaves the routes makes the pinned rocketmq-client-go race with itself (its
## cleanOfflineBroker deletes from a broker's address map under a lock that FindBrokerAddrByName does not take).
## txmsg's own code is race-checked by make test.
CLUSTER_NAMESRV ?= 127.0.0.1:29876
CLUSTER_BROKER_PORTS ?= 30911,31911
CLUSTER_ENV = TXMSG_CLUSTER_NAMESRV=$(CLUSTER_NAMESRV) \
	TXMSG_CLUSTER_BROKERS=broker-a=127.0.0.1:$(word 1,$(subst $(comma), ,$(CLUSTER_BROKER_PORTS))),broker-b=127.0.0.1:$(word 2,$(subst $(comma), ,$(CLUSTER_BROKER_PORTS)))
comma := ,
RMQ_CLUSTER = $(CLUSTER_ENV) scripts/rocketmq.sh --cluster
test-cluster: services-up
	$(RMQ_CLUSTER) stop
	$(RMQ_CLUSTER) wipe
	$(RMQ_CLUSTER) start
	status=0; $(CLUSTER_ENV) TXMSG_REQUIRE_SERVICES=1 $(GO) test -count=1 -p 1 -timeout 15m \
		./adapters/txrmq/ ./adapters/outbox/ || status=$$?; \
	$(RMQ_CLUSTER) stop; exit $$status

## test-broker-faults: the tests that need a broker of their own, each on a private broker (ports and store
## of its own; the default-port broker is never touched), started and stopped here: a broker that is
## SIGKILLed and restarted under a relay, under the consumers and under the sweeper (TXMSG_BROKER_RESTART:
## the tests that call testbed.RequireRestartableBroker), and one that deletes its commit-log files within
## seconds, so a new consumer group gets "not found" for its start offset (TXMSG_EXPIRING_BROKER: the tests
## that call testbed.RunsOnExpiringBroker). With either set, the packages' other tests skip. About 3 min.
## Without -race, like test-cluster; -p 1: the restart tests of both packages kill the same broker. See docs/testing.md.
RESTART_ENV = TXMSG_NAMESRV=127.0.0.1:14876 TXMSG_BROKER=127.0.0.1:15911
EXPIRING_ENV = TXMSG_NAMESRV=127.0.0.1:16876 TXMSG_BROKER=127.0.0.1:17911 TXMSG_RMQ_EXTRA_CONF=scripts/rocketmq/expiring.conf
test-broker-faults:
	$(MYSQL_UP)
	$(RESTART_ENV) scripts/rocketmq.sh stop
	$(RESTART_ENV) scripts/rocketmq.sh wipe
	$(RESTART_ENV) scripts/rocketmq.sh start
	status=0; $(RESTART_ENV) TXMSG_BROKER_RESTART=1 TXMSG_REQUIRE_SERVICES=1 $(GO) test -count=1 -p 1 -timeout 10m \
		./adapters/outbox/ ./adapters/txrmq/ || status=$$?; \
	$(RESTART_ENV) scripts/rocketmq.sh stop; exit $$status
	$(EXPIRING_ENV) scripts/rocketmq.sh stop
	$(EXPIRING_ENV) scripts/rocketmq.sh wipe
	$(EXPIRING_ENV) scripts/rocketmq.sh start
	status=0; $(EXPIRING_ENV) TXMSG_EXPIRING_BROKER=1 TXMSG_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 10m \
		./adapters/txrmq/ || status=$$?; \
	$(EXPIRING_ENV) scripts/rocketmq.sh stop; exit $$status

## test-stock: the tests that call testbed.RunsOnStockBroker (the conformance suites of adapters/txrmq and
## adapters/outbox, and a check-back that commits an event whose END_TRANSACTION was lost) on a broker with
## RocketMQ's stock settings: scripts/rocketmq.sh --stock, whose scripts/rocketmq/stock.conf names the instance
## and tunes nothing (on 5.3.3, check-backs once a half message is 6 s old, 30 s apart), on ports of its own
## (name server 18876, broker 19911; the default-port broker is never touched), from an empty store, stopped
## after. The packages' other tests skip. The broker does not start when its disk is more than 85% used (above
## that a stock broker deletes stored messages; above 90% it refuses them). About 90 s. See docs/testing.md.
STOCK_ENV = TXMSG_NAMESRV=127.0.0.1:18876 TXMSG_BROKER=127.0.0.1:19911
test-stock:
	$(MYSQL_UP)
	$(STOCK_ENV) scripts/rocketmq.sh stop
	$(STOCK_ENV) scripts/rocketmq.sh wipe
	$(STOCK_ENV) scripts/rocketmq.sh --stock start
	status=0; $(STOCK_ENV) TXMSG_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 10m \
		./adapters/txrmq/ ./adapters/outbox/ || status=$$?; \
	$(STOCK_ENV) scripts/rocketmq.sh stop; exit $$status

## test-ha: the tests that call testbed.RequireHA, RequireHAController or RequireHAAny (adapters/txrmq,
## adapters/outbox and dashboard; with TXMSG_HA set the packages' other tests skip) on the HA form of the test bed, three times: two
## groups of a master and a slave (broker-a 21911 with broker-a-s 21921, broker-b 22911 with broker-b-s 22921, name
## server 20876; the default-port broker is never touched) from the Maven Central jars, first with asynchronous
## replication (scripts/rocketmq.sh --ha), then with synchronous replication (--ha-sync: SYNC_MASTER,
## inSyncReplicas=2), then in RocketMQ 5's controller mode (--ha-controller: a controller in the name server, on
## 20878, elects each group's master; RocketMQ ROCKETMQ_CONTROLLER_VERSION of scripts/versions.env), each from an
## empty store and stopped after. The tests SIGKILL and SIGSTOP
## masters and slaves under load, fail broker-a over by hand after its slave fell behind (rmq -ha promote), and let
## the controller fail it over. Without -race, like test-cluster. About 14 min. See docs/testing.md.
HA_ENV = TXMSG_HA_NAMESRV=127.0.0.1:20876 TXMSG_HA_BROKERS=broker-a=127.0.0.1:21911,broker-b=127.0.0.1:22911
test-ha:
	$(MYSQL_UP)
	@set -e; for mode in async sync controller; do \
		flag=--ha; [ $$mode = sync ] && flag=--ha-sync; [ $$mode = controller ] && flag=--ha-controller; \
		$(HA_ENV) scripts/rocketmq.sh $$flag stop; \
		$(HA_ENV) scripts/rocketmq.sh $$flag wipe; \
		$(HA_ENV) scripts/rocketmq.sh $$flag start; \
		status=0; $(HA_ENV) TXMSG_HA=$$mode TXMSG_REQUIRE_SERVICES=1 $(GO) test -count=1 -p 1 -timeout 10m \
			./adapters/txrmq/ ./adapters/outbox/ ./dashboard/ || status=$$?; \
		$(HA_ENV) scripts/rocketmq.sh $$flag stop; \
		[ $$status = 0 ] || exit $$status; \
	done

## unit: the tests that need no services (others skip).
unit:
	$(GO) test -race -count=1 ./...
	@$(call in_nested,$(GO) test -race -count=1 ./...)

services-up:
	$(MYSQL_UP)
	scripts/rocketmq.sh start

services-down:
	scripts/rocketmq.sh stop
	$(MYSQL_DOWN)

services-status:
	-scripts/mysql.sh status
	-scripts/rocketmq.sh status

vet:
	$(GO) vet ./...
	@$(call in_nested,$(GO) vet ./...)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## hygiene: fail when git tracks a binary other than the docs' images, or a non-test Go file has an init().
hygiene:
	@bad=$$(git ls-files -z | while IFS= read -r -d '' f; do \
		case $$f in *.png|*.jpg|*.jpeg|*.gif|*.ico|*.woff|*.woff2) continue;; esac; \
		[ -s "$$f" ] && ! grep -qI . "$$f" && echo "$$f"; \
	done; true); \
	if [ -n "$$bad" ]; then echo "binary files tracked by git (build them into .cache/ or add them to .gitignore):"; echo "$$bad"; exit 1; fi
	@if git grep -n '^func init()' -- '*.go' ':!*_test.go'; then echo "init() outside tests: register on first use instead"; exit 1; fi

## wire-check: fail when a wire_gen.go is stale: regenerate in a temporary copy of the module and diff.
## wire runs at the version go.mod requires, without being a tool of the module (its own dependencies
## stay out of go.mod).
WIRE_PKGS := ./examples/orderservice
WIRE = $(GO) run github.com/google/wire/cmd/wire@$$($(GO) list -m -f '{{.Version}}' github.com/google/wire)
wire-check:
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	tar -cf - --exclude=./.git --exclude=./.cache . | tar -xf - -C "$$tmp"; \
	(cd "$$tmp" && $(WIRE) gen $(WIRE_PKGS) >"$$tmp/wire.log" 2>&1) || { cat "$$tmp/wire.log"; exit 1; }; \
	stale=0; for p in $(WIRE_PKGS); do \
		diff -u "$$p/wire_gen.go" "$$tmp/$$p/wire_gen.go" || stale=1; \
	done; \
	if [ $$stale -ne 0 ]; then echo "wire_gen.go is stale; run: $(GO) run github.com/google/wire/cmd/wire@v0.7.0 $(WIRE_PKGS)/..."; exit 1; fi

## quickstart: run the quick-start program (examples/quickstart) in both modes against the test bed; each
## run saves one order with its event and exits 0 once a consumer has handled the event.
QUICKSTART_DSN ?= txmsg:txmsg@tcp(127.0.0.1:$(TXMSG_MYSQL_PORT))/txmsg_quickstart?parseTime=true
quickstart: services-up
	$(GO) run ./internal/testbed/cmd/prepare -dsn '$(QUICKSTART_DSN)' -topic quickstart,quickstart-outbox
	QUICKSTART_DSN='$(QUICKSTART_DSN)' QUICKSTART_NAMESRV='$(TXMSG_NAMESRV)' $(GO) run ./examples/quickstart -mode transactional
	QUICKSTART_DSN='$(QUICKSTART_DSN)' QUICKSTART_NAMESRV='$(TXMSG_NAMESRV)' QUICKSTART_TOPIC=quickstart-outbox $(GO) run ./examples/quickstart -mode outbox

## demo: run examples/orderservice against the real broker and database, drive ~200 orders and print a consistency report (MODE=transactional|outbox).
## It prints the URL of the service's txmsg dashboard; DEMO_FLAGS=-linger=10m keeps the service up that long after the report.
DEMO_BIN := .cache/demo/orderservice
demo: services-up
	$(GO) build -o $(DEMO_BIN) ./examples/orderservice
	$(GO) run ./examples/orderservice/cmd/demo -service $(DEMO_BIN) -mode $(MODE) $(DEMO_FLAGS)

## bench: cmd/txbench side by side with the naive way, the raw client and the physical limits, in interleaved
## trials, on the real services (about 6-7 min; BENCH_FLAGS=-json for one JSON object), then the in-process
## micro-benchmarks. See docs/benchmarks.md.
BENCH_BIN := .cache/bench/txbench
bench: services-up
	$(GO) build -o $(BENCH_BIN) ./cmd/txbench
	$(BENCH_BIN) $(BENCH_FLAGS)
	$(GO) test -run '^$$' -bench . -benchmem ./txmsg/ ./adapters/txrmq/

## chaos: cmd/txchaos: an order workload in both modes, producer/relay/consumer as separate processes, with
## process kills, broker kills and pauses and database restarts injected under load; checks I1-I6 and exits
## non-zero on a violation (about 10 min; CHAOS_FLAGS, e.g. -duration 20m -faults 20). See docs/reliability.md.
## CLUSTER=1 runs it on the two-broker cluster of test-cluster (started, wiped first, and stopped after):
## topics on both brokers, broker faults alternate between broker-a and broker-b.
## HA=1 (or HA=sync, HA=controller) runs it on the HA form of test-ha (asynchronous or synchronous replication, or
## the controller's failover; started, wiped first, and stopped after): topics on every master and slave, the
## reconciler on in every stack, broker faults on the groups' current masters, and the HA kinds slave-kill,
## master-kill-failover and failover-tail-loss (by hand: not on the controller form) or master-pause-election (the
## controller form's) besides the others.
CHAOS_BIN := .cache/chaos/txchaos
HA_CHAOS_FLAG = $(if $(filter sync,$(HA)),--ha-sync,$(if $(filter controller,$(HA)),--ha-controller,--ha))
HA_CHAOS_MODE = $(if $(filter sync controller,$(HA)),$(HA),async)
ifneq ($(HA),)
chaos:
	$(MYSQL_UP)
	$(HA_ENV) scripts/rocketmq.sh $(HA_CHAOS_FLAG) stop
	$(HA_ENV) scripts/rocketmq.sh $(HA_CHAOS_FLAG) wipe
	$(HA_ENV) scripts/rocketmq.sh $(HA_CHAOS_FLAG) start
	$(GO) build -o $(CHAOS_BIN) $(CHAOS_PKG)
	status=0; $(HA_ENV) TXMSG_HA=$(HA_CHAOS_MODE) $(CHAOS_BIN) -ha $(CHAOS_FLAGS) || status=$$?; \
	$(HA_ENV) scripts/rocketmq.sh $(HA_CHAOS_FLAG) stop; exit $$status
else ifeq ($(CLUSTER),1)
chaos:
	$(MYSQL_UP)
	$(RMQ_CLUSTER) stop
	$(RMQ_CLUSTER) wipe
	$(RMQ_CLUSTER) start
	$(GO) build -o $(CHAOS_BIN) $(CHAOS_PKG)
	status=0; $(CLUSTER_ENV) $(CHAOS_BIN) -cluster $(CHAOS_FLAGS) || status=$$?; \
	$(RMQ_CLUSTER) stop; exit $$status
else
chaos: services-up
	$(GO) build -o $(CHAOS_BIN) $(CHAOS_PKG)
	$(CHAOS_BIN) $(CHAOS_FLAGS)
endif
