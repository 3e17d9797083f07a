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
test: services-up vet fmt-check
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
