#!/usr/bin/env bash
# RocketMQ for the txmsg test bed: one name server and one broker on loopback.
#
#   scripts/rocketmq.sh start    start (or reuse) and wait until a message can be sent
#   scripts/rocketmq.sh stop     stop what this script started
#   scripts/rocketmq.sh status   print running / not running per process
#   scripts/rocketmq.sh kill     SIGKILL the broker (a crash; the name server stays up);
#                                `start` brings it back. Used by the chaos suite.
#   scripts/rocketmq.sh pause    SIGSTOP the broker (it holds connections but answers nothing)
#   scripts/rocketmq.sh resume   SIGCONT the broker
#   scripts/rocketmq.sh owns     exit 0 when the running broker was started by this
#                                script (so kill/pause/resume can act on it)
#
# Two ways to run it, chosen automatically:
#   - Docker: when `docker info` works, `docker compose -f docker/compose.yml`
#     (services namesrv and broker; the same file also has mysql, not touched here).
#   - No Docker: when java (and mvn, for the first download) exist, the
#     rocketmq-namesrv and rocketmq-broker jars from Maven Central, run with java.
#     Everything (jars, config, logs, store, pid files) lives in
#     ${TXMSG_CACHE:-<repo>/.cache}/rocketmq/<version>/.
# The version is pinned in scripts/versions.env; the broker config is
# scripts/rocketmq/broker.conf (short transaction check window for tests).
#
# Environment:
#   TXMSG_NAMESRV            name server address (default 127.0.0.1:9876)
#   TXMSG_CACHE              cache root (default <repo>/.cache)
#   TXMSG_ROCKETMQ_MODE      auto (default) | docker | jar
#   TXMSG_RMQ_READY_TIMEOUT  readiness deadline (default 120s)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/versions.env disable=SC1091
. "$ROOT/scripts/versions.env"
: "${ROCKETMQ_VERSION:?ROCKETMQ_VERSION missing from scripts/versions.env}"

NAMESRV=${TXMSG_NAMESRV:-127.0.0.1:9876}
NS_HOST=${NAMESRV%:*}
NS_PORT=${NAMESRV##*:}
BROKER_HOST=127.0.0.1
BROKER_PORT=10911
READY_TIMEOUT=${TXMSG_RMQ_READY_TIMEOUT:-120s}
MODE=${TXMSG_ROCKETMQ_MODE:-auto}

CACHE_ROOT=${TXMSG_CACHE:-$ROOT/.cache}
RMQ_DIR=$CACHE_ROOT/rocketmq/$ROCKETMQ_VERSION
LIB=$RMQ_DIR/lib
CONF_DIR=$RMQ_DIR/conf
LOG_DIR=$RMQ_DIR/logs                  # stdout/stderr of the JVMs
RMQ_LOG_DIR=$RMQ_DIR/logs/rocketmqlogs # RocketMQ's own logs (user.home=$RMQ_DIR)
STORE_DIR=$RMQ_DIR/store

COMPOSE_FILE=$ROOT/docker/compose.yml

log() { printf 'rocketmq.sh: %s\n' "$*"; }
die() { printf 'rocketmq.sh: %s\n' "$*" >&2; exit 1; }

usage() {
	echo "usage: $0 start|stop|status|kill|pause|resume|owns" >&2
	exit 2
}

# ---------------------------------------------------------------- helpers

is_loopback() {
	case "$1" in
	127.* | localhost | ::1 | '[::1]') return 0 ;;
	*) return 1 ;;
	esac
}

# port_open HOST PORT: something accepts TCP connections there.
port_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

docker_ok() {
	command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 &&
		docker compose version >/dev/null 2>&1
}

find_java() {
	if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
		echo "$JAVA_HOME/bin/java"
	elif command -v java >/dev/null 2>&1; then
		command -v java
	else
		return 1
	fi
}

jars_present() {
	[[ -f $LIB/.complete && -f $LIB/rocketmq-broker-$ROCKETMQ_VERSION.jar && -f $LIB/rocketmq-namesrv-$ROCKETMQ_VERSION.jar ]]
}

choose_mode() {
	case "$MODE" in
	docker | jar) echo "$MODE" ;;
	auto)
		if [[ -f $RMQ_DIR/namesrv.pid || -f $RMQ_DIR/broker.pid ]]; then
			echo jar # JVMs started earlier by this script: keep managing them
		elif docker_ok; then
			echo docker
		elif find_java >/dev/null && { command -v mvn >/dev/null 2>&1 || jars_present; }; then
			echo jar
		else
			echo none
		fi
		;;
	*) die "TXMSG_ROCKETMQ_MODE must be auto, docker or jar (got '$MODE')" ;;
	esac
}

need_go() {
	command -v go >/dev/null 2>&1 || die "the readiness check needs Go ('go' on PATH) to run ./internal/testbed/cmd/rmqready."
}

# Runs the readiness probe in the background so that a JVM dying meanwhile
# is noticed at once. Arguments: names of components started by this call
# (their pid files are watched). Returns the probe's exit status, or 10 when
# one of those JVMs exited.
wait_ready() {
	need_go
	mkdir -p "$RMQ_DIR/bin"
	log "waiting (up to $READY_TIMEOUT) until the name server at $NAMESRV routes a test message ..."
	(cd "$ROOT" && go build -o "$RMQ_DIR/bin/rmqready" ./internal/testbed/cmd/rmqready) ||
		die "could not build ./internal/testbed/cmd/rmqready"
	"$RMQ_DIR/bin/rmqready" -namesrv "$NAMESRV" -timeout "$READY_TIMEOUT" 9>&- &
	local probe=$! name pid
	while kill -0 "$probe" 2>/dev/null; do
		for name in "$@"; do
			pid=$(cat "$RMQ_DIR/$name.pid" 2>/dev/null || true)
			if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
				kill "$probe" 2>/dev/null || true
				wait "$probe" 2>/dev/null || true
				rm -f "$RMQ_DIR/$name.pid"
				log "the $name JVM (pid $pid) exited during start-up; last lines of $LOG_DIR/$name.out and $RMQ_LOG_DIR/$name.log:"
				grep -v -e '|-INFO in' -e '|-WARN in' "$LOG_DIR/$name.out" 2>/dev/null | tail -n 20 >&2 || true
				tail -n 20 "$RMQ_LOG_DIR/$name.log" >&2 2>/dev/null || true
				return 10
			fi
		done
		sleep 1
	done
	wait "$probe"
}

# ---------------------------------------------------------------- jar path

# pid_of NAME: pid from NAME.pid if that process is alive and is our JVM.
pid_of() {
	local name=$1 pid class
	[[ -f $RMQ_DIR/$name.pid ]] || return 1
	pid=$(cat "$RMQ_DIR/$name.pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	case $name in
	namesrv) class=org.apache.rocketmq.namesrv.NamesrvStartup ;;
	broker) class=org.apache.rocketmq.broker.BrokerStartup ;;
	esac
	# Guard against a recycled pid: the command line must be ours.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -e "$class" || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -F -e "$RMQ_DIR" || return 1
	echo "$pid"
}

ensure_jars() {
	if jars_present; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "RocketMQ $ROCKETMQ_VERSION jars are not in $LIB and Maven ('mvn') is missing: install maven (apt-get install maven) or Docker."
	log "downloading rocketmq-namesrv and rocketmq-broker $ROCKETMQ_VERSION with dependencies from Maven Central into $LIB ..."
	local tmp=$LIB.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$tmp"
	mkdir -p "$LOG_DIR"
	if ! mvn -B -Dstyle.color=never -f "$ROOT/scripts/rocketmq/pom.xml" \
		-Drocketmq.version="$ROCKETMQ_VERSION" \
		dependency:copy-dependencies -DoutputDirectory="$tmp" >"$LOG_DIR/mvn.log" 2>&1; then
		grep -E 'ERROR|FAIL' "$LOG_DIR/mvn.log" | tail -n 20 >&2 || true
		rm -rf "$tmp"
		die "mvn could not resolve RocketMQ $ROCKETMQ_VERSION from Maven Central (full output: $LOG_DIR/mvn.log)."
	fi
	[[ -f $tmp/rocketmq-broker-$ROCKETMQ_VERSION.jar ]] || die "mvn finished but rocketmq-broker-$ROCKETMQ_VERSION.jar is not in $tmp"
	rm -rf "$LIB"
	mv "$tmp" "$LIB"
	touch "$LIB/.complete"
	log "$(find "$LIB" -name '*.jar' | wc -l) jars in $LIB"
}

write_configs() {
	mkdir -p "$CONF_DIR" "$LOG_DIR" "$STORE_DIR"
	local bind=127.0.0.1
	cat >"$CONF_DIR/namesrv.conf" <<EOF
# Generated by scripts/rocketmq.sh; edit the script, not this file.
listenPort=$NS_PORT
bindAddress=$bind
EOF
	{
		echo "# Generated by scripts/rocketmq.sh from scripts/rocketmq/broker.conf; edit that file."
		cat "$ROOT/scripts/rocketmq/broker.conf"
		echo
		echo "# --- set by scripts/rocketmq.sh for the no-Docker path (later lines win) ---"
		echo "namesrvAddr=$NAMESRV"
		echo "brokerIP1=$BROKER_HOST"
		echo "listenPort=$BROKER_PORT"
		echo "bindAddress=$bind"
		echo "storePathRootDir=$STORE_DIR"
		echo "storePathCommitLog=$STORE_DIR/commitlog"
	} >"$CONF_DIR/broker.conf"
}

java_flags() {
	local java=$1 major
	major=$("$java" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
	major=${major%%.*}
	[[ $major == 1 ]] && major=8
	local -a f=(-server -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow
		-Duser.home="$RMQ_DIR" -Drocketmq.home.dir="$RMQ_DIR" -Dfile.encoding=UTF-8)
	if ((major >= 9)); then
		# DefaultMappedFile/CommitLog/TransientStorePool cast to sun.nio.ch.DirectBuffer
		# (mlock/munlock, madvise, page-cache residency). Without this export those
		# paths die with IllegalAccessError on JDK 16+ (seen with warmMapedFileEnable=true:
		# the AllocateMappedFileService thread dies and every send then times out).
		f+=(--add-exports=java.base/sun.nio.ch=ALL-UNNAMED)
	fi
	printf '%s\n' "${f[@]}"
}

# launch NAME CLASS HEAP_FLAGS... -- ARGS...
launch() {
	local name=$1 class=$2
	shift 2
	local -a jvm=() args=()
	while (($#)) && [[ $1 != -- ]]; do
		jvm+=("$1")
		shift
	done
	(($#)) && shift
	args=("$@")
	local java
	java=$(find_java)
	local -a common
	mapfile -t common < <(java_flags "$java")
	: >"$LOG_DIR/$name.out"
	# setsid: own session, so the JVM survives the calling shell/terminal;
	# the inner bash writes its pid and execs java, so the pid file is the JVM's.
	# shellcheck disable=SC2016 # $$ and $1 are for the inner bash
	ROCKETMQ_HOME=$RMQ_DIR setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' _ \
		"$RMQ_DIR/$name.pid" "$java" "${common[@]}" "${jvm[@]}" -cp "$LIB/*" "$class" "${args[@]}" \
		>>"$LOG_DIR/$name.out" 2>&1 </dev/null 9>&- &
	disown $! 2>/dev/null || true
	local i
	for i in $(seq 1 50); do
		[[ -s $RMQ_DIR/$name.pid ]] && break
		sleep 0.1
	done
	log "started $name (pid $(cat "$RMQ_DIR/$name.pid" 2>/dev/null || echo '?'))"
}

wait_port() {
	local host=$1 port=$2 name=$3 secs=$4 i pid
	for ((i = 0; i < secs * 2; i++)); do
		port_open "$host" "$port" && return 0
		pid=$(cat "$RMQ_DIR/$name.pid" 2>/dev/null || true)
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.5
	done
	return 1
}

jar_start() {
	local java
	java=$(find_java) || die "no 'java' found: install a JDK 17 (apt-get install openjdk-17-jdk-headless) and maven, or Docker."
	mkdir -p "$RMQ_DIR"
	exec 9>"$RMQ_DIR/.lock"
	flock -w 600 9 || die "another rocketmq.sh holds $RMQ_DIR/.lock"

	local -a started=() external=()
	local ns_pid br_pid
	ns_pid=$(pid_of namesrv || true)
	br_pid=$(pid_of broker || true)

	local running_addr
	running_addr=$(cat "$RMQ_DIR/namesrv.addr" 2>/dev/null || true)
	if [[ (-n $ns_pid || -n $br_pid) && -n $running_addr && $running_addr != "$NAMESRV" ]]; then
		die "RocketMQ started by this script is running with name server $running_addr, not $NAMESRV: run '$0 stop' first (with TXMSG_NAMESRV=$running_addr)."
	fi

	if [[ -n $ns_pid && -n $br_pid ]]; then
		log "already running (namesrv pid $ns_pid, broker pid $br_pid); re-checking readiness"
		wait_ready || die "RocketMQ started by this script is running but not ready; see $RMQ_LOG_DIR"
		print_where
		return 0
	fi

	# Name server.
	if [[ -n $ns_pid ]]; then
		log "namesrv already running (pid $ns_pid)"
	elif port_open "$NS_HOST" "$NS_PORT"; then
		log "port $NS_PORT is already served by a process this script did not start; will reuse it if it answers"
		external+=(namesrv)
	else
		ensure_jars
		write_configs
		rm -f "$RMQ_DIR/namesrv.pid"
		echo "$NAMESRV" >"$RMQ_DIR/namesrv.addr"
		launch namesrv org.apache.rocketmq.namesrv.NamesrvStartup \
			-Xms128m -Xmx256m -Drmq.logback.configurationFile=rmq.namesrv.logback.xml \
			-- -c "$CONF_DIR/namesrv.conf"
		started+=(namesrv)
		wait_port "$NS_HOST" "$NS_PORT" namesrv 60 || {
			tail -n 20 "$LOG_DIR/namesrv.out" >&2 || true
			die "the name server did not open $NS_HOST:$NS_PORT; logs: $LOG_DIR/namesrv.out, $RMQ_LOG_DIR/namesrv.log"
		}
	fi

	# Broker.
	if [[ -n $br_pid ]]; then
		log "broker already running (pid $br_pid)"
	elif port_open "$BROKER_HOST" "$BROKER_PORT"; then
		log "port $BROKER_PORT is already served by a process this script did not start; will reuse it if it answers"
		external+=(broker)
	else
		ensure_jars
		write_configs
		rm -f "$RMQ_DIR/broker.pid"
		echo "$NAMESRV" >"$RMQ_DIR/namesrv.addr"
		launch broker org.apache.rocketmq.broker.BrokerStartup \
			-Xms256m -Xmx768m -XX:MaxDirectMemorySize=512m \
			-Drmq.logback.configurationFile=rmq.broker.logback.xml \
			-- -c "$CONF_DIR/broker.conf"
		started+=(broker)
	fi

	local rc=0
	wait_ready "${started[@]}" || rc=$?
	if ((rc == 10)); then
		die "a RocketMQ JVM exited during start-up (see above); '$0 status' shows what is left running."
	elif ((rc != 0)); then
		if ((${#external[@]})); then
			die "${external[*]} port(s) ($NS_PORT/$BROKER_PORT) are served by something this script did not start, and RocketMQ at $NAMESRV does not answer: stop that process or set TXMSG_NAMESRV."
		fi
		die "RocketMQ did not become ready within $READY_TIMEOUT; logs: $LOG_DIR/*.out and $RMQ_LOG_DIR/{namesrv,broker}.log"
	fi
	if ((${#external[@]})); then
		log "reusing ${external[*]} not started by this script (it answers at $NAMESRV); its logs are wherever it was started from"
		((${#external[@]} == 2)) && return 0
	fi
	print_where
}

print_where() {
	log "RocketMQ $ROCKETMQ_VERSION ready: name server $NAMESRV, broker $BROKER_HOST:$BROKER_PORT"
	log "logs: $RMQ_LOG_DIR/{namesrv,broker,transaction,store}.log (JVM output: $LOG_DIR/{namesrv,broker}.out)"
}

# stop_one NAME: TERM, wait (a broker needs 10-20 s to shut down), then KILL.
stop_one() {
	local name=$1 pid i
	if ! pid=$(pid_of "$name"); then
		if [[ -f $RMQ_DIR/$name.pid ]]; then
			log "$name: stale pid file removed (process gone)"
			rm -f "$RMQ_DIR/$name.pid"
		else
			log "$name: not started by this script; nothing to stop"
		fi
		return 0
	fi
	log "stopping $name (pid $pid) ..."
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 120; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "$name (pid $pid) still running after 60 s; sending KILL"
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 20; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
	fi
	kill -0 "$pid" 2>/dev/null && die "$name (pid $pid) would not exit"
	rm -f "$RMQ_DIR/$name.pid"
	log "$name stopped"
}

jar_stop() {
	mkdir -p "$RMQ_DIR"
	exec 9>"$RMQ_DIR/.lock"
	flock -w 600 9 || die "another rocketmq.sh holds $RMQ_DIR/.lock"
	# Broker first: on shutdown it unregisters from the name server.
	stop_one broker
	stop_one namesrv
}

status_one() {
	local name=$1 host=$2 port=$3 pid
	if pid=$(pid_of "$name"); then
		if port_open "$host" "$port"; then
			echo "$name: running (pid $pid, $host:$port)"
		else
			echo "$name: running (pid $pid), $host:$port not open yet"
		fi
		return 0
	elif port_open "$host" "$port"; then
		echo "$name: not running from this script; $host:$port is served by another process"
		return 1
	else
		echo "$name: not running"
		return 1
	fi
}

jar_status() {
	local rc=0
	status_one namesrv "$NS_HOST" "$NS_PORT" || rc=3
	status_one broker "$BROKER_HOST" "$BROKER_PORT" || rc=3
	echo "logs: $RMQ_LOG_DIR"
	return $rc
}

# jar_signal VERB: kill, pause or resume the broker JVM started by this script.
# No lock: a crash does not wait for a start in progress.
jar_signal() {
	local pid
	pid=$(pid_of broker) || die "broker: not running from this script; nothing to $1"
	case $1 in
	kill)
		kill -KILL "$pid"
		local i
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && die "broker (pid $pid) survived SIGKILL"
		rm -f "$RMQ_DIR/broker.pid"
		log "broker (pid $pid) killed"
		;;
	pause)
		kill -STOP "$pid"
		log "broker (pid $pid) paused"
		;;
	resume)
		kill -CONT "$pid"
		log "broker (pid $pid) resumed"
		;;
	esac
}

# ---------------------------------------------------------------- Docker path

compose() {
	ROCKETMQ_VERSION=$ROCKETMQ_VERSION docker compose --env-file "$ROOT/scripts/versions.env" -f "$COMPOSE_FILE" "$@"
}

docker_running() { # service
	[[ -n $(compose ps -q --status running "$1" 2>/dev/null) ]]
}

docker_start() {
	[[ $NS_PORT == 9876 ]] || die "the Docker path publishes the name server on 9876 only (TXMSG_NAMESRV=$NAMESRV)"
	if docker_running namesrv && docker_running broker; then
		log "containers namesrv and broker already running; re-checking readiness"
	elif ! docker_running namesrv && ! docker_running broker &&
		{ port_open "$NS_HOST" "$NS_PORT" || port_open "$BROKER_HOST" "$BROKER_PORT"; }; then
		log "ports $NS_PORT/$BROKER_PORT are served by something not started by this script; will reuse it if it answers"
		wait_ready || die "ports $NS_PORT/$BROKER_PORT are served by something this script did not start, and RocketMQ at $NAMESRV does not answer: stop it or set TXMSG_NAMESRV."
		log "reusing the RocketMQ already serving $NAMESRV"
		return 0
	else
		log "starting apache/rocketmq:$ROCKETMQ_VERSION (namesrv, broker) with docker compose"
		compose up -d namesrv broker
	fi
	wait_ready || {
		compose logs --tail 30 namesrv broker >&2 || true
		die "RocketMQ containers did not become ready within $READY_TIMEOUT"
	}
	log "RocketMQ $ROCKETMQ_VERSION ready: name server $NAMESRV, broker $BROKER_HOST:$BROKER_PORT"
	log "logs: docker compose -f docker/compose.yml logs broker (RocketMQ logs in the container under /home/rocketmq/logs/rocketmqlogs)"
}

docker_stop() {
	compose stop namesrv broker
	compose rm -f namesrv broker
}

docker_signal() {
	case $1 in
	kill) compose kill -s SIGKILL broker ;;
	pause) compose pause broker ;;
	resume) compose unpause broker ;;
	esac
}

docker_status() {
	local rc=0 s
	for s in namesrv broker; do
		if docker_running "$s"; then
			echo "$s: running (container)"
		else
			echo "$s: not running"
			rc=3
		fi
	done
	echo "logs: docker compose -f docker/compose.yml logs namesrv broker"
	return $rc
}

# ---------------------------------------------------------------- main

(($# == 1)) || usage
cmd=$1

if ! is_loopback "$NS_HOST"; then
	# A remote name server: nothing to start or stop here, only check it.
	case $cmd in
	start)
		log "TXMSG_NAMESRV=$NAMESRV is not a loopback address: not starting anything, only checking it"
		wait_ready
		;;
	stop | kill | pause | resume) log "TXMSG_NAMESRV=$NAMESRV is not local: nothing to $cmd" ;;
	owns) exit 1 ;;
	status)
		if port_open "$NS_HOST" "$NS_PORT"; then
			echo "namesrv: $NAMESRV answers (remote)"
		else
			echo "namesrv: $NAMESRV does not answer (remote)"
			exit 3
		fi
		;;
	*) usage ;;
	esac
	exit 0
fi

mode=$(choose_mode)
if [[ $mode == none ]]; then
	die "neither a working Docker engine (with docker compose) nor java+mvn found: install Docker, or a JDK 17 and Maven (apt-get install openjdk-17-jdk-headless maven)."
fi

case "$mode:$cmd" in
jar:start) jar_start ;;
jar:stop) jar_stop ;;
jar:status) jar_status ;;
jar:kill | jar:pause | jar:resume) jar_signal "$cmd" ;;
jar:owns) pid_of broker >/dev/null ;;
docker:start) docker_start ;;
docker:stop) docker_stop ;;
docker:status) docker_status ;;
docker:kill | docker:pause | docker:resume) docker_signal "$cmd" ;;
docker:owns) docker_running broker ;;
*) usage ;;
esac
