#!/usr/bin/env bash
# RocketMQ for the txmsg test bed: one name server and one broker on loopback,
# or the two-broker cluster of make test-cluster.
#
#   scripts/rocketmq.sh start    start (or reuse) and wait until a message can be sent
#   scripts/rocketmq.sh stop     stop what was started here
#   scripts/rocketmq.sh status   print running / not running per process
#   scripts/rocketmq.sh kill|pause|resume|owns|wipe|ready
#                                the other verbs of ./internal/testbed/cmd/rmq
#   scripts/rocketmq.sh fetch    download the RocketMQ jars of the version from
#                                Maven Central (start does it when they are missing)
#   scripts/rocketmq.sh start --cluster, scripts/rocketmq.sh kill broker-a, ...
#                                the cluster form
#   scripts/rocketmq.sh --ha start, scripts/rocketmq.sh --ha-sync start,
#   scripts/rocketmq.sh --ha kill broker-a-s, ...
#                                the HA form: two groups of a master and a
#                                slave, asynchronous or synchronous replication
#                                (make test-ha)
#   scripts/rocketmq.sh --ha-controller start
#                                the same groups in RocketMQ 5's controller
#                                mode: a controller in the name server elects
#                                each group's master and fails it over by
#                                itself
#   scripts/rocketmq.sh --ha promote broker-a, --ha rebuild broker-a
#                                a failover by hand after broker-a's disk is
#                                lost (its slave restarted as the master), and
#                                its undoing
#   scripts/rocketmq.sh --stock start
#                                the broker with RocketMQ's stock settings
#                                (scripts/rocketmq/stock.conf, not broker.conf),
#                                on ports of its own (make test-stock)
#
# Every verb but fetch runs ./internal/testbed/cmd/rmq (built into
# <cache>/bin/rmq), a command over the Go package internal/testbed/rmqproc,
# which the tests and cmd/txchaos use directly. Its environment, directories
# and flags: docs/testing.md ("How the test bed runs RocketMQ").
#
# fetch: org.apache.rocketmq:rocketmq-namesrv and rocketmq-broker of
# TXMSG_RMQ_VERSION (default ROCKETMQ_VERSION of scripts/versions.env) with
# their dependencies, resolved by Maven (scripts/rocketmq/pom.xml) into
# ${TXMSG_CACHE:-<repo>/.cache}/rocketmq/<version>/lib/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/versions.env disable=SC1091
. "$ROOT/scripts/versions.env"
: "${ROCKETMQ_VERSION:?ROCKETMQ_VERSION missing from scripts/versions.env}"
VERSION=${TXMSG_RMQ_VERSION:-$ROCKETMQ_VERSION}
CACHE_ROOT=${TXMSG_CACHE:-$ROOT/.cache}

log() { printf 'rocketmq.sh: %s\n' "$*"; }
die() { printf 'rocketmq.sh: %s\n' "$*" >&2; exit 1; }

fetch() {
	[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
		{ echo "rocketmq.sh: TXMSG_RMQ_VERSION must look like 4.9.7 or 5.3.3 (got '$VERSION')" >&2; exit 2; }
	local vdir=$CACHE_ROOT/rocketmq/$VERSION
	local lib=$vdir/lib
	present() {
		[[ -f $lib/.complete && -f $lib/rocketmq-broker-$VERSION.jar && -f $lib/rocketmq-namesrv-$VERSION.jar ]]
	}
	present && return 0
	# Instances of one version on different ports share the jars: one download at a time.
	mkdir -p "$vdir"
	exec 8>"$vdir/.lib.lock"
	flock -w 900 8 || die "another rocketmq.sh holds $vdir/.lib.lock"
	present && return 0
	command -v mvn >/dev/null 2>&1 || die "RocketMQ $VERSION jars are not in $lib and Maven ('mvn') is missing: install maven (apt-get install maven) or Docker."
	log "downloading rocketmq-namesrv and rocketmq-broker $VERSION with dependencies from Maven Central into $lib ..."
	local tmp=$lib.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$tmp"
	if ! mvn -B -Dstyle.color=never -f "$ROOT/scripts/rocketmq/pom.xml" \
		-Drocketmq.version="$VERSION" \
		dependency:copy-dependencies -DoutputDirectory="$tmp" >"$vdir/mvn.log" 2>&1; then
		grep -E 'ERROR|FAIL' "$vdir/mvn.log" | tail -n 20 >&2 || true
		rm -rf "$tmp"
		die "mvn could not resolve RocketMQ $VERSION from Maven Central (full output: $vdir/mvn.log)."
	fi
	[[ -f $tmp/rocketmq-broker-$VERSION.jar ]] || die "mvn finished but rocketmq-broker-$VERSION.jar is not in $tmp"
	rm -rf "$lib"
	mv "$tmp" "$lib"
	touch "$lib/.complete"
	exec 8>&-
	log "$(find "$lib" -name '*.jar' | wc -l) jars in $lib"
}

usage() {
	echo "usage: $0 [--cluster | --ha | --ha-sync | --ha-controller | --stock] [-ready-timeout 120s] start|stop|status|kill|pause|resume|owns|wipe|ready|promote|rebuild [broker-a|broker-b|broker-a-s|broker-b-s]" >&2
	echo "       $0 fetch" >&2
	exit 2
}

(($#)) || usage
if [[ $1 == fetch ]]; then
	(($# == 1)) || usage
	fetch
	exit
fi
command -v go >/dev/null 2>&1 || die "this script runs ./internal/testbed/cmd/rmq: it needs Go ('go' on PATH)."
bin=$CACHE_ROOT/bin
mkdir -p "$bin"
(cd "$ROOT" && go build -o "$bin/rmq.$$" ./internal/testbed/cmd/rmq && mv -f "$bin/rmq.$$" "$bin/rmq") ||
	die "could not build ./internal/testbed/cmd/rmq"
exec "$bin/rmq" -root "$ROOT" "$@"
