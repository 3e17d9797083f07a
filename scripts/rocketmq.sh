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
#   scripts/rocketmq.sh wipe     delete the store and logs of a stopped jar-path
#                                instance (fails while it runs), so that the next
#                                start begins with an empty broker
#
# Cluster form (TXMSG_RMQ_BROKERS=2, or `start --cluster`): one name server and
# two master brokers, broker-a and broker-b, in one cluster (brokerClusterName
# DefaultCluster), on ports of their own, from the jars only:
#   name server TXMSG_CLUSTER_NAMESRV (default 127.0.0.1:29876),
#   brokers TXMSG_CLUSTER_BROKER_PORTS (default 30911,31911; each also uses
#   port-2 and port+1). Directories: <cache>/rocketmq/<version>/cluster-<namesrv port>/
#   with the name server's files there and each broker's below it (broker-a/,
#   broker-b/: own config, store, logs and pid file). Every command takes an
#   optional broker name, e.g.
#     TXMSG_RMQ_BROKERS=2 scripts/rocketmq.sh kill broker-a
#     TXMSG_RMQ_BROKERS=2 scripts/rocketmq.sh start          (starts what is missing)
#   The cluster form never reuses a process it did not start (as with
#   TXMSG_RMQ_EXCLUSIVE=1) and refuses the default ports.
#
# Two ways to run it, chosen automatically:
#   - Docker: when `docker info` works, `docker compose -f docker/compose.yml`
#     (services namesrv and broker; the same file also has mysql, not touched here).
#   - No Docker: when java (and mvn, for the first download) exist, the
#     rocketmq-namesrv and rocketmq-broker jars from Maven Central, run with java.
#     Everything (jars, config, logs, store, pid files) lives in
#     ${TXMSG_CACHE:-<repo>/.cache}/rocketmq/<version>/ (the jars in lib/);
#     a name server and broker on other than the default ports get their own
#     directory below it, ports-<namesrv port>-<broker port>/, so that stop,
#     status, kill, pause and resume only ever act on what was started with
#     the same version and ports.
# The default version is pinned in scripts/versions.env; the broker config is
# scripts/rocketmq/broker.conf (short transaction check window for tests).
# On the jar path the config a broker gets keeps only the settings its version
# knows (setters of its config classes, read with javap); the others are
# listed on start and left out.
#
# Environment:
#   TXMSG_NAMESRV            name server address (default 127.0.0.1:9876)
#   TXMSG_RMQ_VERSION        RocketMQ version (default ROCKETMQ_VERSION of
#                            scripts/versions.env); tested: 4.3.2, 4.9.7, 5.3.3, 5.5.0
#   TXMSG_RMQ_BROKER_PORT    broker port (default 10911). The broker also
#                            listens on port-2 (fast/VIP channel) and port+1 (HA),
#                            so a second broker needs a port at least 4 away,
#                            e.g. TXMSG_NAMESRV=127.0.0.1:19876 TXMSG_RMQ_BROKER_PORT=20911
#   TXMSG_CACHE              cache root (default <repo>/.cache)
#   TXMSG_ROCKETMQ_MODE      auto (default) | docker | jar
#   TXMSG_RMQ_READY_TIMEOUT  readiness deadline (default 120s)
#   TXMSG_RMQ_EXTRA_CONF     a file of broker settings appended to broker.conf
#                            (later lines win), on the jar path only (the
#                            Docker path ignores it); e.g.
#                            scripts/rocketmq/expiring.conf, a broker
#                            that deletes its commit-log files within seconds
#                            (docs/testing.md)
#   TXMSG_RMQ_EXCLUSIVE      1: start fails when a port is served by a process
#                            this script did not start for the same version
#                            and ports, instead of reusing it (the compatibility
#                            runs use it so that a test never talks to a
#                            broker of another version)
#   TXMSG_RMQ_BROKERS        1 (default) or 2: the cluster form above
#   TXMSG_CLUSTER_NAMESRV    the cluster's name server (default 127.0.0.1:29876)
#   TXMSG_CLUSTER_BROKER_PORTS  the cluster's broker ports, broker-a first
#                            (default 30911,31911)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/versions.env disable=SC1091
. "$ROOT/scripts/versions.env"
: "${ROCKETMQ_VERSION:?ROCKETMQ_VERSION missing from scripts/versions.env}"

DEFAULT_NS_PORT=9876
DEFAULT_BROKER_PORT=10911
ROCKETMQ_VERSION=${TXMSG_RMQ_VERSION:-$ROCKETMQ_VERSION}
BROKERS=${TXMSG_RMQ_BROKERS:-1}
if [[ ${1:-} == start && ${2:-} == --cluster ]]; then
	BROKERS=2
	set -- start
fi
[[ $BROKERS == 1 || $BROKERS == 2 ]] ||
	{ echo "rocketmq.sh: TXMSG_RMQ_BROKERS must be 1 or 2 (got '$BROKERS')" >&2; exit 2; }
CLUSTER=0
CLUSTER_BROKERS=(broker-a broker-b)
if ((BROKERS == 2)); then
	CLUSTER=1
	NAMESRV=${TXMSG_CLUSTER_NAMESRV:-127.0.0.1:29876}
	IFS=', ' read -r -a CLUSTER_PORTS <<<"${TXMSG_CLUSTER_BROKER_PORTS:-30911,31911}"
	((${#CLUSTER_PORTS[@]} == 2)) ||
		{ echo "rocketmq.sh: TXMSG_CLUSTER_BROKER_PORTS must be two ports, broker-a's and broker-b's (got '${TXMSG_CLUSTER_BROKER_PORTS:-}')" >&2; exit 2; }
	TXMSG_RMQ_BROKER_PORT=${CLUSTER_PORTS[0]}
	EXCLUSIVE=1
fi
NAMESRV=${NAMESRV:-${TXMSG_NAMESRV:-127.0.0.1:$DEFAULT_NS_PORT}}
NS_HOST=${NAMESRV%:*}
NS_PORT=${NAMESRV##*:}
BROKER_HOST=127.0.0.1
BROKER_PORT=${TXMSG_RMQ_BROKER_PORT:-$DEFAULT_BROKER_PORT}
READY_TIMEOUT=${TXMSG_RMQ_READY_TIMEOUT:-120s}
EXTRA_CONF=${TXMSG_RMQ_EXTRA_CONF:-}
[[ -z $EXTRA_CONF || -r $EXTRA_CONF ]] ||
	{ echo "rocketmq.sh: TXMSG_RMQ_EXTRA_CONF: cannot read '$EXTRA_CONF'" >&2; exit 2; }
MODE=${TXMSG_ROCKETMQ_MODE:-auto}
EXCLUSIVE=${EXCLUSIVE:-${TXMSG_RMQ_EXCLUSIVE:-0}}
BROKER_NAME=broker-a

[[ $ROCKETMQ_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
	{ echo "rocketmq.sh: TXMSG_RMQ_VERSION must look like 4.9.7 or 5.3.3 (got '$ROCKETMQ_VERSION')" >&2; exit 2; }
[[ $NS_PORT =~ ^[0-9]+$ ]] && ((NS_PORT > 0 && NS_PORT < 65536)) ||
	{ echo "rocketmq.sh: TXMSG_NAMESRV must be host:port (got '$NAMESRV')" >&2; exit 2; }
[[ $BROKER_PORT =~ ^[0-9]+$ ]] && ((BROKER_PORT > 2 && BROKER_PORT < 65535)) ||
	{ echo "rocketmq.sh: TXMSG_RMQ_BROKER_PORT must be a port between 3 and 65534 (got '$BROKER_PORT')" >&2; exit 2; }
# The broker listens on BROKER_PORT, BROKER_PORT-2 (fast/VIP) and BROKER_PORT+1 (HA).
if ((NS_PORT >= BROKER_PORT - 2 && NS_PORT <= BROKER_PORT + 1)); then
	echo "rocketmq.sh: name server port $NS_PORT collides with the broker's ports $((BROKER_PORT - 2))-$((BROKER_PORT + 1))" >&2
	exit 2
fi
if ((CLUSTER)); then
	for p in "${CLUSTER_PORTS[@]}"; do
		[[ $p =~ ^[0-9]+$ ]] && ((p > 2 && p < 65535)) ||
			{ echo "rocketmq.sh: TXMSG_CLUSTER_BROKER_PORTS: '$p' is not a port between 3 and 65534" >&2; exit 2; }
		((p - 2 <= DEFAULT_BROKER_PORT + 1 && p + 1 >= DEFAULT_BROKER_PORT - 2)) &&
			{ echo "rocketmq.sh: the cluster's broker port $p overlaps the default broker's ports" >&2; exit 2; }
		((NS_PORT >= p - 2 && NS_PORT <= p + 1)) &&
			{ echo "rocketmq.sh: name server port $NS_PORT collides with the broker's ports $((p - 2))-$((p + 1))" >&2; exit 2; }
	done
	a=${CLUSTER_PORTS[0]} b=${CLUSTER_PORTS[1]}
	((a - b >= 4 || b - a >= 4)) ||
		{ echo "rocketmq.sh: broker-a port $a and broker-b port $b must be at least 4 apart (each uses port-2..port+1)" >&2; exit 2; }
	[[ $NS_PORT != "$DEFAULT_NS_PORT" ]] ||
		{ echo "rocketmq.sh: the cluster form does not use the default name server port $DEFAULT_NS_PORT" >&2; exit 2; }
fi

CACHE_ROOT=${TXMSG_CACHE:-$ROOT/.cache}
VERSION_DIR=$CACHE_ROOT/rocketmq/$ROCKETMQ_VERSION
# One instance directory per version and ports: the default ports keep the
# version directory itself (where earlier runs left their pid files).
if [[ $NS_PORT == "$DEFAULT_NS_PORT" && $BROKER_PORT == "$DEFAULT_BROKER_PORT" ]]; then
	RMQ_DIR=$VERSION_DIR
else
	RMQ_DIR=$VERSION_DIR/ports-$NS_PORT-$BROKER_PORT
fi
LIB=$VERSION_DIR/lib
CLUSTER_DIR=$VERSION_DIR/cluster-$NS_PORT
((CLUSTER)) && RMQ_DIR=$CLUSTER_DIR

# use_instance DIR [BROKER_NAME BROKER_PORT]: point the jar path's globals at
# one instance directory (the cluster's name server and each of its brokers
# have their own).
use_instance() {
	RMQ_DIR=$1
	CONF_DIR=$RMQ_DIR/conf
	LOG_DIR=$RMQ_DIR/logs                  # stdout/stderr of the JVMs
	RMQ_LOG_DIR=$RMQ_DIR/logs/rocketmqlogs # RocketMQ's own logs (user.home=$RMQ_DIR)
	STORE_DIR=$RMQ_DIR/store
	if (($# == 3)); then
		BROKER_NAME=$2
		BROKER_PORT=$3
	fi
	CONFIGS_WRITTEN=
}
use_instance "$RMQ_DIR"

# use_broker NAME: the cluster's broker NAME (broker-a or broker-b).
use_broker() {
	local i
	for i in "${!CLUSTER_BROKERS[@]}"; do
		if [[ ${CLUSTER_BROKERS[$i]} == "$1" ]]; then
			use_instance "$CLUSTER_DIR/$1" "$1" "${CLUSTER_PORTS[$i]}"
			return 0
		fi
	done
	die "no broker '$1' in the cluster (brokers: ${CLUSTER_BROKERS[*]})"
}

COMPOSE_FILE=$ROOT/docker/compose.yml

log() { printf 'rocketmq.sh: %s\n' "$*"; }
die() { printf 'rocketmq.sh: %s\n' "$*" >&2; exit 1; }

usage() {
	echo "usage: $0 start|stop|status|kill|pause|resume|owns|wipe" >&2
	echo "       TXMSG_RMQ_BROKERS=2 $0 start|stop|status|kill|pause|resume|owns|wipe [broker-a|broker-b]" >&2
	echo "       $0 start --cluster" >&2
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
# is noticed at once. Arguments: components started by this call, as
# DIR/NAME (pid file DIR/NAME.pid, output DIR/logs/NAME.out); a bare NAME is
# $RMQ_DIR/NAME. READY_ARGS holds extra rmqready flags (the cluster's
# brokers). Returns the probe's exit status, or 10 when one of those JVMs
# exited.
READY_ARGS=()
wait_ready() {
	need_go
	local bin=$RMQ_DIR/bin
	mkdir -p "$bin"
	log "waiting (up to $READY_TIMEOUT) until the name server at $NAMESRV routes a test message${READY_ARGS[*]:+ to every broker}${READY_ARGS[*]:+ (${READY_ARGS[*]})} ..."
	(cd "$ROOT" && go build -o "$bin/rmqready.$$" ./internal/testbed/cmd/rmqready && mv -f "$bin/rmqready.$$" "$bin/rmqready") ||
		die "could not build ./internal/testbed/cmd/rmqready"
	"$bin/rmqready" -namesrv "$NAMESRV" -timeout "$READY_TIMEOUT" "${READY_ARGS[@]}" 9>&- &
	local probe=$! c dir name pid
	while kill -0 "$probe" 2>/dev/null; do
		for c in "$@"; do
			if [[ $c == */* ]]; then dir=${c%/*} name=${c##*/}; else dir=$RMQ_DIR name=$c; fi
			pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
			if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
				kill "$probe" 2>/dev/null || true
				wait "$probe" 2>/dev/null || true
				rm -f "$dir/$name.pid"
				log "the $name JVM of $dir (pid $pid) exited during start-up; last lines of $dir/logs/$name.out and $dir/logs/rocketmqlogs/$name.log:"
				grep -v -e '|-INFO in' -e '|-WARN in' "$dir/logs/$name.out" 2>/dev/null | tail -n 20 >&2 || true
				tail -n 20 "$dir/logs/rocketmqlogs/$name.log" >&2 2>/dev/null || true
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
	# Guard against a recycled pid: the command line must be ours, with
	# user.home exactly this instance's directory (not merely containing it:
	# instances on other ports live in subdirectories of the default one).
	local args
	args=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	grep -q -x -F -e "$class" <<<"$args" || return 1
	grep -q -x -F -e "-Duser.home=$RMQ_DIR" <<<"$args" || return 1
	echo "$pid"
}

ensure_jars() {
	if jars_present; then
		return 0
	fi
	# Instances of one version on different ports share the jars: one download at a time.
	mkdir -p "$VERSION_DIR"
	exec 8>"$VERSION_DIR/.lib.lock"
	flock -w 900 8 || die "another rocketmq.sh holds $VERSION_DIR/.lib.lock"
	if jars_present; then
		exec 8>&-
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
	exec 8>&-
	log "$(find "$LIB" -name '*.jar' | wc -l) jars in $LIB"
}

# config_keys NAME CLASS...: the property names the given config classes
# accept, one a line. RocketMQ reads a config file by calling setX for each
# property x that has a setter (inherited ones included) and silently ignores
# the rest, so the setters are the settings. Cached in $LIB/.keys-NAME.
# Prints nothing when javap is missing.
config_keys() {
	local cache=$LIB/.keys-$1 javap cls out
	shift
	if [[ -s $cache ]]; then
		cat "$cache"
		return 0
	fi
	javap=$(dirname "$(readlink -f "$(find_java)")")/javap
	[[ -x $javap ]] || javap=$(command -v javap) || return 0
	local -a queue=("$@")
	while ((${#queue[@]})); do
		cls=${queue[0]}
		queue=("${queue[@]:1}")
		out=$("$javap" -cp "$LIB/*" -public "$cls" 2>/dev/null) || continue # class not in this version
		sed -n -E 's/^ *public [^(]*void set([A-Za-z0-9_]+)\([^,)]+\);$/\1/p' <<<"$out"
		# Follow superclasses inside RocketMQ (5.x: BrokerConfig extends BrokerIdentity).
		cls=$(grep -o -E ' extends org\.apache\.rocketmq\.[A-Za-z0-9_.$]+' <<<"$out" | head -n 1 || true)
		[[ -n $cls ]] && queue+=("${cls# extends }")
	done | sed -E 's/^(.)/\L\1/' | sort -u >"$cache.tmp.$$"
	mv "$cache.tmp.$$" "$cache"
	cat "$cache"
}

# filter_conf NAME CLASS...: copies a properties file from stdin to stdout,
# turning each key=value line whose key the version's config classes do not
# know into a comment; the left-out keys go to $CONF_DIR/NAME.dropped.
filter_conf() {
	local name=$1 keys line key
	shift
	keys=$(config_keys "$name" "$@")
	: >"$CONF_DIR/$name.dropped"
	while IFS= read -r line || [[ -n $line ]]; do
		if [[ -n $keys && $line =~ ^[[:space:]]*([A-Za-z0-9_.]+)[[:space:]]*= ]]; then
			key=${BASH_REMATCH[1]}
			# Up to 4.5.1 some settings were spelt "maped" (mapedFileSizeCommitLog).
			if ! grep -q -x -F -e "$key" <<<"$keys" && [[ $key == *mapped* ]] &&
				grep -q -x -F -e "${key/mapped/maped}" <<<"$keys"; then
				echo "# spelt ${key/mapped/maped} in RocketMQ $ROCKETMQ_VERSION:"
				line=${line/$key/${key/mapped/maped}}
				key=${key/mapped/maped}
			fi
			if ! grep -q -x -F -e "$key" <<<"$keys"; then
				echo "# not a setting of RocketMQ $ROCKETMQ_VERSION, left out: $line"
				echo "$key" >>"$CONF_DIR/$name.dropped"
				continue
			fi
		fi
		printf '%s\n' "$line"
	done
}

# Where BrokerStartup and NamesrvStartup put the config file's properties.
BROKER_CONFIG_CLASSES=(org.apache.rocketmq.common.BrokerConfig org.apache.rocketmq.store.config.MessageStoreConfig
	org.apache.rocketmq.remoting.netty.NettyServerConfig org.apache.rocketmq.remoting.netty.NettyClientConfig
	org.apache.rocketmq.auth.config.AuthConfig)
NAMESRV_CONFIG_CLASSES=(org.apache.rocketmq.common.namesrv.NamesrvConfig
	org.apache.rocketmq.remoting.netty.NettyServerConfig org.apache.rocketmq.remoting.netty.NettyClientConfig)

write_configs() {
	[[ -z ${CONFIGS_WRITTEN:-} ]] || return 0 # once per run: the same for both JVMs
	CONFIGS_WRITTEN=1
	mkdir -p "$CONF_DIR" "$LOG_DIR" "$STORE_DIR"
	local bind=127.0.0.1 name dropped
	{
		echo "# Generated by scripts/rocketmq.sh; edit the script, not this file."
		echo "listenPort=$NS_PORT"
		echo "bindAddress=$bind"
	} | filter_conf namesrv "${NAMESRV_CONFIG_CLASSES[@]}" >"$CONF_DIR/namesrv.conf"
	{
		echo "# Generated by scripts/rocketmq.sh from scripts/rocketmq/broker.conf; edit that file."
		cat "$ROOT/scripts/rocketmq/broker.conf"
		if [[ -n $EXTRA_CONF ]]; then
			echo
			echo "# --- from $EXTRA_CONF (TXMSG_RMQ_EXTRA_CONF) ---"
			cat "$EXTRA_CONF"
		fi
		echo
		echo "# --- set by scripts/rocketmq.sh for the no-Docker path (later lines win) ---"
		echo "namesrvAddr=$NAMESRV"
		echo "brokerName=$BROKER_NAME"
		echo "brokerIP1=$BROKER_HOST"
		echo "listenPort=$BROKER_PORT"
		echo "bindAddress=$bind"
		echo "storePathRootDir=$STORE_DIR"
		echo "storePathCommitLog=$STORE_DIR/commitlog"
	} | filter_conf broker "${BROKER_CONFIG_CLASSES[@]}" >"$CONF_DIR/broker.conf"
	if [[ ! -s $LIB/.keys-broker ]]; then
		log "javap not found: the config files keep every setting (RocketMQ ignores the ones it does not know)"
	fi
	for name in namesrv broker; do
		dropped=$(paste -s -d, "$CONF_DIR/$name.dropped")
		[[ -z $dropped ]] || log "RocketMQ $ROCKETMQ_VERSION has no $name setting $dropped: left out of $CONF_DIR/$name.conf"
	done
	write_logback
}

# RocketMQ 4.x configures logback from $ROCKETMQ_HOME/conf/logback_{namesrv,broker}.xml
# and exits when the file is missing; the files ship in the binary
# distribution, not in the jars. (5.x uses rmq.*.logback.xml from its jars.)
write_logback() {
	local name
	for name in namesrv broker; do
		{
			echo '<?xml version="1.0" encoding="UTF-8"?>'
			echo '<!-- Generated by scripts/rocketmq.sh for RocketMQ 4.x. -->'
			echo '<configuration>'
			logback_appender "$name"
			if [[ $name == broker ]]; then
				logback_appender transaction
				logback_appender store
				logback_appender stats
				local logger ref
				for logger in RocketmqTransaction:transaction RocketmqStore:store RocketmqStoreError:store \
					RocketmqStats:stats RocketmqBrokerStats:stats RocketmqCommercial:stats; do
					ref=${logger#*:}
					echo "  <logger name=\"${logger%%:*}\" additivity=\"false\" level=\"INFO\"><appender-ref ref=\"$ref\"/></logger>"
				done
			fi
			echo "  <root level=\"INFO\"><appender-ref ref=\"$name\"/></root>"
			echo '</configuration>'
		} >"$CONF_DIR/logback_$name.xml"
	done
}

# logback_appender NAME: a size-rolled file appender for $RMQ_LOG_DIR/NAME.log.
logback_appender() {
	cat <<EOF
  <appender name="$1" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>$RMQ_LOG_DIR/$1.log</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>$RMQ_LOG_DIR/$1.%i.log.gz</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>3</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>64MB</maxFileSize>
    </triggeringPolicy>
    <encoder><pattern>%d{yyyy-MM-dd HH:mm:ss,SSS} %p %t - %m%n</pattern><charset>UTF-8</charset></encoder>
  </appender>
EOF
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
		if [[ ${ROCKETMQ_VERSION%%.*} == 4 ]]; then
			# 4.x unmaps a file (MappedFile.clean: on shutdown, and when deleting
			# expired or truncating dirty commit log, consume queue and index
			# files) through reflection on java.nio.DirectByteBuffer.attachment()/
			# cleaner() and jdk.internal.ref.Cleaner.clean(). On JDK 16+ each fails
			# with InaccessibleObjectException unless both packages are opened:
			# the shutdown hook dies half-way and leaves store/abort behind, so
			# the next start recovers as after a crash. (5.x uses
			# Unsafe.invokeCleaner instead.)
			f+=(--add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED)
		fi
	fi
	if [[ ${ROCKETMQ_VERSION%%.*} == 4 ]]; then
		# 4.x has the disk-full thresholds as system properties (fractions, default
		# 0.90 / 0.85), not as settings: pass broker.conf's percentages that way.
		local k v
		for k in diskSpaceWarningLevelRatio diskSpaceCleanForciblyRatio; do
			v=$(sed -n -E "s/^[[:space:]]*$k[[:space:]]*=[[:space:]]*([0-9]+)[[:space:]]*$/\1/p" "$ROOT/scripts/rocketmq/broker.conf" | tail -n 1)
			[[ -z $v ]] || f+=("-Drocketmq.broker.$k=$(awk -v p="$v" 'BEGIN { printf "%.2f", p / 100 }')")
		done
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

# refuse_foreign NAME HOST PORT: with TXMSG_RMQ_EXCLUSIVE=1, fail instead of
# reusing a process this invocation's directory did not start, and name the
# instance of this script that holds the port, if any.
refuse_foreign() {
	((EXCLUSIVE)) || return 0
	local owner="" dir pid
	for dir in "$CACHE_ROOT"/rocketmq/*/ "$CACHE_ROOT"/rocketmq/*/ports-*/; do
		pid=$(cat "$dir$1.pid" 2>/dev/null) || continue
		if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
			owner+=" ${dir%/} (pid $pid)"
		fi
	done
	die "TXMSG_RMQ_EXCLUSIVE=1: $2:$3 is already served by a process not started for RocketMQ $ROCKETMQ_VERSION on these ports${owner:+; $1 JVMs started by this script:$owner}. Stop it first."
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
		refuse_foreign namesrv "$NS_HOST" "$NS_PORT"
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
		refuse_foreign broker "$BROKER_HOST" "$BROKER_PORT"
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

# jar_wipe: delete the store and logs of this version and ports, when neither
# JVM of this instance runs and the ports are free.
jar_wipe() {
	mkdir -p "$RMQ_DIR"
	exec 9>"$RMQ_DIR/.lock"
	flock -w 600 9 || die "another rocketmq.sh holds $RMQ_DIR/.lock"
	local name
	for name in namesrv broker; do
		pid_of "$name" >/dev/null && die "$name of RocketMQ $ROCKETMQ_VERSION on these ports is running: '$0 stop' first"
	done
	port_open "$BROKER_HOST" "$BROKER_PORT" && die "$BROKER_HOST:$BROKER_PORT is served by another process: not wiping $STORE_DIR"
	rm -rf "$STORE_DIR" "$LOG_DIR"
	log "deleted $STORE_DIR and $LOG_DIR"
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

# ---------------------------------------------------------------- cluster (jar path)

# cluster_ready_args: rmqready flags naming every broker of the cluster, so
# that readiness means each one is registered and takes a message.
cluster_ready_args() {
	local i list=""
	for i in "${!CLUSTER_BROKERS[@]}"; do
		list+="${list:+,}${CLUSTER_BROKERS[$i]}=$BROKER_HOST:${CLUSTER_PORTS[$i]}"
	done
	READY_ARGS=(-brokers "$list")
}

# cluster_names [NAME]: the brokers a command acts on.
cluster_names() {
	if [[ -n ${1:-} ]]; then
		use_broker "$1" # validates the name
		echo "$1"
	else
		printf '%s\n' "${CLUSTER_BROKERS[@]}"
	fi
}

cluster_lock() {
	mkdir -p "$CLUSTER_DIR"
	exec 9>"$CLUSTER_DIR/.lock"
	flock -w 600 9 || die "another rocketmq.sh holds $CLUSTER_DIR/.lock"
}

# cluster_start [NAME]: start the name server and the brokers (or broker
# NAME) that are not running, then wait until every broker takes messages.
cluster_start() {
	find_java >/dev/null || die "no 'java' found: install a JDK 17 (apt-get install openjdk-17-jdk-headless) and maven."
	cluster_lock
	local -a started=()
	local pid name t0=$SECONDS
	use_instance "$CLUSTER_DIR"
	if pid=$(pid_of namesrv); then
		log "cluster namesrv already running (pid $pid)"
	else
		port_open "$NS_HOST" "$NS_PORT" && refuse_foreign namesrv "$NS_HOST" "$NS_PORT"
		ensure_jars
		write_configs
		rm -f "$RMQ_DIR/namesrv.pid"
		echo "$NAMESRV" >"$RMQ_DIR/namesrv.addr"
		launch namesrv org.apache.rocketmq.namesrv.NamesrvStartup \
			-Xms128m -Xmx256m -Drmq.logback.configurationFile=rmq.namesrv.logback.xml \
			-- -c "$CONF_DIR/namesrv.conf"
		started+=("$RMQ_DIR/namesrv")
		wait_port "$NS_HOST" "$NS_PORT" namesrv 60 || {
			tail -n 20 "$LOG_DIR/namesrv.out" >&2 || true
			die "the cluster's name server did not open $NS_HOST:$NS_PORT; logs: $LOG_DIR/namesrv.out"
		}
	fi
	for name in $(cluster_names "${1:-}"); do
		use_broker "$name"
		if pid=$(pid_of broker); then
			log "$name already running (pid $pid)"
			continue
		fi
		port_open "$BROKER_HOST" "$BROKER_PORT" && refuse_foreign broker "$BROKER_HOST" "$BROKER_PORT"
		ensure_jars
		write_configs
		rm -f "$RMQ_DIR/broker.pid"
		launch broker org.apache.rocketmq.broker.BrokerStartup \
			-Xms256m -Xmx512m -XX:MaxDirectMemorySize=256m \
			-Drmq.logback.configurationFile=rmq.broker.logback.xml \
			-- -c "$CONF_DIR/broker.conf"
		started+=("$RMQ_DIR/broker")
	done
	use_instance "$CLUSTER_DIR"
	cluster_ready_args
	local rc=0
	wait_ready "${started[@]}" || rc=$?
	((rc == 10)) && die "a RocketMQ JVM of the cluster exited during start-up (see above)"
	((rc == 0)) || die "the cluster did not become ready within $READY_TIMEOUT; logs: $CLUSTER_DIR/{logs,broker-a/logs,broker-b/logs}"
	log "RocketMQ $ROCKETMQ_VERSION cluster ready after $((SECONDS - t0)) s: name server $NAMESRV, broker-a $BROKER_HOST:${CLUSTER_PORTS[0]}, broker-b $BROKER_HOST:${CLUSTER_PORTS[1]}"
	log "logs: $CLUSTER_DIR/logs, $CLUSTER_DIR/broker-{a,b}/logs"
}

# cluster_stop [NAME]: stop broker NAME, or both brokers and the name server.
cluster_stop() {
	cluster_lock
	local name
	for name in $(cluster_names "${1:-}"); do
		use_broker "$name"
		log "$name:"
		stop_one broker
	done
	if [[ -z ${1:-} ]]; then
		use_instance "$CLUSTER_DIR"
		stop_one namesrv
	fi
}

cluster_status() {
	local rc=0 name
	use_instance "$CLUSTER_DIR"
	status_one namesrv "$NS_HOST" "$NS_PORT" || rc=3
	for name in $(cluster_names "${1:-}"); do
		use_broker "$name"
		printf '%s ' "$name"
		status_one broker "$BROKER_HOST" "$BROKER_PORT" || rc=3
	done
	echo "logs: $CLUSTER_DIR/logs, $CLUSTER_DIR/broker-{a,b}/logs"
	return $rc
}

# cluster_signal VERB [NAME]: kill, pause or resume broker NAME (both when
# no name is given; kill needs a name, so that a typo never takes the
# whole cluster down).
cluster_signal() {
	[[ $1 != kill || -n ${2:-} ]] || die "kill needs a broker name in the cluster form: kill broker-a or kill broker-b"
	local name
	for name in $(cluster_names "${2:-}"); do
		use_broker "$name"
		if [[ $1 == resume ]] && ! pid_of broker >/dev/null; then
			continue # nothing paused there
		fi
		jar_signal "$1" | sed "s/^rocketmq.sh: broker/rocketmq.sh: $name/"
	done
}

cluster_owns() {
	local name
	for name in $(cluster_names "${1:-}"); do
		use_broker "$name"
		pid_of broker >/dev/null || return 1
	done
}

cluster_wipe() {
	cluster_lock
	local name
	use_instance "$CLUSTER_DIR"
	pid_of namesrv >/dev/null && [[ -z ${1:-} ]] && die "the cluster's name server is running: '$0 stop' first"
	for name in $(cluster_names "${1:-}"); do
		use_broker "$name"
		pid_of broker >/dev/null && die "$name is running: '$0 stop $name' first"
		port_open "$BROKER_HOST" "$BROKER_PORT" && die "$BROKER_HOST:$BROKER_PORT is served by another process: not wiping $STORE_DIR"
		rm -rf "$STORE_DIR" "$LOG_DIR"
		log "deleted $STORE_DIR and $LOG_DIR"
	done
	if [[ -z ${1:-} ]]; then
		rm -rf "$CLUSTER_DIR/logs"
	fi
}

# ---------------------------------------------------------------- Docker path

compose() {
	ROCKETMQ_VERSION=$ROCKETMQ_VERSION docker compose --env-file "$ROOT/scripts/versions.env" -f "$COMPOSE_FILE" "$@"
}

docker_running() { # service
	[[ -n $(compose ps -q --status running "$1" 2>/dev/null) ]]
}

docker_start() {
	[[ $NS_PORT == "$DEFAULT_NS_PORT" && $BROKER_PORT == "$DEFAULT_BROKER_PORT" ]] ||
		die "the Docker path publishes the default ports only (name server $DEFAULT_NS_PORT, broker $DEFAULT_BROKER_PORT; got $NS_PORT and $BROKER_PORT): use TXMSG_ROCKETMQ_MODE=jar for other ports"
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

(($# == 1 || $# == 2)) || usage
cmd=$1
target=${2:-}
if [[ -n $target ]] && ((!CLUSTER)); then
	die "a broker name ('$target') is for the cluster form (TXMSG_RMQ_BROKERS=2 or start --cluster)"
fi

if ((CLUSTER)); then
	is_loopback "$NS_HOST" || die "the cluster form runs on loopback only (TXMSG_CLUSTER_NAMESRV=$NAMESRV)"
	[[ $MODE != docker ]] || die "the cluster form runs from the jars; for Docker use the cluster profile of docker/compose.yml"
	case $cmd in
	start) cluster_start "$target" ;;
	stop) cluster_stop "$target" ;;
	status) cluster_status "$target" ;;
	kill | pause | resume) cluster_signal "$cmd" "$target" ;;
	owns) cluster_owns "$target" ;;
	wipe) cluster_wipe "$target" ;;
	*) usage ;;
	esac
	exit
fi

if ! is_loopback "$NS_HOST"; then
	# A remote name server: nothing to start or stop here, only check it.
	case $cmd in
	start)
		log "TXMSG_NAMESRV=$NAMESRV is not a loopback address: not starting anything, only checking it"
		wait_ready
		;;
	stop | kill | pause | resume | wipe) log "TXMSG_NAMESRV=$NAMESRV is not local: nothing to $cmd" ;;
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
jar:wipe) jar_wipe ;;
docker:start) docker_start ;;
docker:stop) docker_stop ;;
docker:status) docker_status ;;
docker:kill | docker:pause | docker:resume) docker_signal "$cmd" ;;
docker:owns) docker_running broker ;;
docker:wipe) die "wipe is for the jar path: the containers keep their store inside and lose it when removed ('$0 stop')" ;;
*) usage ;;
esac
