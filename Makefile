# txmsg: make test starts the real broker and database it needs, then runs
# every test against them. See README.md.
SHELL := /bin/bash
GO ?= go
MODE ?= transactional
export TXMSG_NAMESRV ?= 127.0.0.1:9876
export TXMSG_BROKER ?= 127.0.0.1:10911
export TXMSG_DSN ?= txmsg:txmsg@tcp(127.0.0.1:3306)/txmsg_test?parseTime=true&loc=UTC&charset=utf8mb4

.PHONY: test unit services-up services-down services-status vet fmt-check wire-check demo bench chaos

## test: start RocketMQ and MariaDB if needed, then run all tests with the race detector.
test: services-up vet fmt-check wire-check
	TXMSG_REQUIRE_SERVICES=1 $(GO) test -race -count=1 -timeout 25m ./...

## unit: the tests that need no services (others skip).
unit:
	$(GO) test -race -count=1 ./...

services-up:
	scripts/mysql.sh start
	scripts/rocketmq.sh start

services-down:
	scripts/rocketmq.sh stop
	scripts/mysql.sh stop

services-status:
	-scripts/mysql.sh status
	-scripts/rocketmq.sh status

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## wire-check: fail when a wire_gen.go is stale: regenerate in a temporary copy of the module and diff.
WIRE_PKGS := ./examples/orderservice
wire-check:
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	tar -cf - --exclude=./.git --exclude=./.cache . | tar -xf - -C "$$tmp"; \
	(cd "$$tmp" && $(GO) run github.com/google/wire/cmd/wire gen $(WIRE_PKGS) >"$$tmp/wire.log" 2>&1) || { cat "$$tmp/wire.log"; exit 1; }; \
	stale=0; for p in $(WIRE_PKGS); do \
		diff -u "$$p/wire_gen.go" "$$tmp/$$p/wire_gen.go" || stale=1; \
	done; \
	if [ $$stale -ne 0 ]; then echo "wire_gen.go is stale; run: $(GO) run github.com/google/wire/cmd/wire $(WIRE_PKGS)/..."; exit 1; fi

## demo: run examples/orderservice against the real broker and database, drive ~200 orders and print a consistency report (MODE=transactional|outbox).
DEMO_BIN := .cache/demo/orderservice
demo: services-up
	$(GO) build -o $(DEMO_BIN) ./examples/orderservice
	$(GO) run ./examples/orderservice/cmd/demo -service $(DEMO_BIN) -mode $(MODE)
