#!/usr/bin/env bash
# Broker compatibility runs (make test-compat): for each RocketMQ version in
# turn, start a name server and broker of that version from Maven Central jars
# on ports of their own, run txmsg's tests against them, stop them.
#
# The brokers run from the jars (scripts/rocketmq.sh, internal/testbed/rmqproc:
# on other than the default ports an instance never reuses a process it did
# not start) in their own directories
# (.cache/rocketmq/<version>/ports-<namesrv>-<broker>/), each starting from an
# empty store. A RocketMQ on the default ports (9876 / 10911) is never
# started, stopped or used.
#
# Scopes (COMPAT_SCOPE):
#   full (default)  transactional   TestTransactionalConformance (adapters/txrmq)
#                   local-table     TestOutboxConformance (adapters/outbox)
#                   consumer        TestConsumer* (adapters/txrmq)
#                   sweeper         TestSweeperRecoversPastTheCheckWindow (adapters/txrmq)
#                   delay           TestTransactionalDelayed (adapters/txrmq): the
#                                   forwarder's delay levels (4.x and 5.x) and
#                                   the broker's timer (5.x only; skipped on 4.x)
#   conformance     the two conformance suites only
#
# Environment:
#   COMPAT_VERSIONS      versions, comma or space separated (default
#                        ROCKETMQ_COMPAT_VERSIONS of scripts/versions.env)
#   COMPAT_SCOPE         full | conformance (default full)
#   COMPAT_NAMESRV       name server address (default 127.0.0.1:19876)
#   COMPAT_BROKER_PORT   broker port (default 20911; it also uses port-2 and port+1)
#   TXMSG_DSN            the MySQL/MariaDB the tests use (as for make test)
#
# Prints one line per version and mode, and exits non-zero when any failed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/versions.env disable=SC1091
. scripts/versions.env

VERSIONS=${COMPAT_VERSIONS:-${ROCKETMQ_COMPAT_VERSIONS:?ROCKETMQ_COMPAT_VERSIONS missing from scripts/versions.env}}
SCOPE=${COMPAT_SCOPE:-full}
NAMESRV=${COMPAT_NAMESRV:-127.0.0.1:19876}
BROKER_PORT=${COMPAT_BROKER_PORT:-20911}
GO=${GO:-go}

log() { printf 'test-compat: %s\n' "$*"; }
die() {
	printf 'test-compat: %s\n' "$*" >&2
	exit 2
}

case $SCOPE in
full) MODES=(transactional local-table consumer sweeper delay) ;;
conformance) MODES=(transactional local-table) ;;
*) die "COMPAT_SCOPE must be full or conformance (got '$SCOPE')" ;;
esac
NS_PORT=${NAMESRV##*:}
# These runs stop what they start: never on the ports of the everyday test bed.
if [[ $NS_PORT == 9876 || $BROKER_PORT == 10911 ]]; then
	die "COMPAT_NAMESRV / COMPAT_BROKER_PORT must not be the test bed's default ports (9876 / 10911)"
fi
read -r -a VERSION_LIST <<<"${VERSIONS//,/ }"
((${#VERSION_LIST[@]})) || die "no versions given"

# package and -run pattern per mode
pkg_of() {
	case $1 in
	local-table) echo ./adapters/outbox/ ;;
	*) echo ./adapters/txrmq/ ;;
	esac
}
run_of() {
	case $1 in
	transactional) echo '^TestTransactionalConformance$' ;;
	local-table) echo '^TestOutboxConformance$' ;;
	consumer) echo '^TestConsumer' ;;
	sweeper) echo '^TestSweeperRecoversPastTheCheckWindow$' ;;
	delay) echo '^TestTransactionalDelayed$' ;;
	esac
}

# version_ge A B: version A is B or later.
version_ge() { [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1) == "$2" ]]; }

# not_applicable VERSION MODE: why MODE cannot pass on VERSION, or nothing.
not_applicable() {
	if [[ $2 == sweeper ]] && ! version_ge "$1" 4.5.2; then
		# DefaultTransactionalMessageCheckListener.resolveDiscardMsg only logs
		# before 4.5.2: the half message is dropped, nothing reaches the topic.
		echo "brokers before 4.5.2 have no TRANS_CHECK_MAX_TIME_TOPIC"
	fi
}

rmq() { # VERSION COMMAND
	TXMSG_RMQ_VERSION=$1 TXMSG_NAMESRV=$NAMESRV TXMSG_BROKER=127.0.0.1:$BROKER_PORT scripts/rocketmq.sh "$2"
}

current=""
cleanup() {
	if [[ -n $current ]]; then
		rmq "$current" stop || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Leftovers of an interrupted run on these ports (only instances of this
# script's own directories are touched).
for v in "${VERSION_LIST[@]}"; do
	rmq "$v" stop >/dev/null
done

log "versions ${VERSION_LIST[*]}, scope $SCOPE, name server $NAMESRV, broker 127.0.0.1:$BROKER_PORT"
declare -a SUMMARY=()
failed=0
for v in "${VERSION_LIST[@]}"; do
	t0=$SECONDS
	log "=== RocketMQ $v"
	rmq "$v" wipe
	current=$v
	if ! rmq "$v" start; then
		SUMMARY+=("$(printf '%-8s %-14s %s' "$v" all "FAIL (the broker did not start)")")
		failed=1
		rmq "$v" stop || true
		current=""
		continue
	fi
	for m in "${MODES[@]}"; do
		m0=$SECONDS
		why=$(not_applicable "$v" "$m")
		if [[ -n $why ]]; then
			log "--- RocketMQ $v, $m: not run: $why"
			SUMMARY+=("$(printf '%-8s %-14s %-5s %s' "$v" "$m" n/a "$why")")
			continue
		fi
		log "--- RocketMQ $v, $m: go test -run '$(run_of "$m")' $(pkg_of "$m")"
		if TXMSG_NAMESRV=$NAMESRV TXMSG_BROKER=127.0.0.1:$BROKER_PORT TXMSG_REQUIRE_SERVICES=1 \
			$GO test -race -count=1 -timeout 10m -run "$(run_of "$m")" "$(pkg_of "$m")"; then
			res=ok
		else
			res=FAIL
			failed=1
		fi
		SUMMARY+=("$(printf '%-8s %-14s %-5s %4ds' "$v" "$m" "$res" $((SECONDS - m0)))")
	done
	rmq "$v" stop
	current=""
	SUMMARY+=("$(printf '%-8s %-14s %-5s %4ds (start, tests, stop)' "$v" total "" $((SECONDS - t0)))")
done

log "summary ($(date -u +%Y-%m-%dT%H:%MZ), scope $SCOPE, $("${JAVA_HOME:+$JAVA_HOME/bin/}java" -version 2>&1 | head -n 1)):"
printf '  %s\n' "${SUMMARY[@]}"
exit $failed
