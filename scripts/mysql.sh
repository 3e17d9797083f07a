#!/usr/bin/env bash
# The MariaDB server of txmsg's test bed: a server of its own, with its own
# data directory, port, socket and pid file under .cache/mysql/, started and
# stopped by this script alone. The tests, the demo, the benchmarks and the
# chaos suite use it; a server that this script did not start (a system
# MariaDB/MySQL on 3306, say) is never used, changed or stopped by it.
#
#   scripts/mysql.sh start    install MariaDB from the OS packages if needed, create the
#                             data directory if it is missing, start the server (or reuse
#                             the one this script started), create the txmsg user
#   scripts/mysql.sh stop     stop the server this script started
#   scripts/mysql.sh restart  stop, then start (used by the chaos suite)
#   scripts/mysql.sh crash    SIGKILL the server and start it again into InnoDB crash
#                             recovery; returns when it answers (used by the chaos suite)
#   scripts/mysql.sh wipe     stop the server and delete its data directory: the next
#                             start creates a server from scratch (CI does this first)
#   scripts/mysql.sh status   say whether the server answers
#   scripts/mysql.sh owns     exit 0 when this script's server runs
#   scripts/mysql.sh info     print the server's version, port, data directory, settings
#                             and every grant it holds
#   scripts/mysql.sh dsn      print the DSN the tests use (TXMSG_DSN)
#
# What it creates. The server runs with --no-defaults: no file under
# /etc/mysql applies, every setting not listed in server_args below is the
# server's own default. Root logs in only through the server's unix socket
# (unix_socket authentication, as the OS user root). The txmsg user exists
# only at localhost and 127.0.0.1 (never '%'), with ALL PRIVILEGES on the
# databases named txmsg_* (`txmsg\_%`) and nothing else: every database a
# test, example, the demo, txbench or txchaos creates starts with txmsg_.
#
# Your own server instead: set TXMSG_DSN and skip this script (the Makefile
# does when TXMSG_DSN comes from the environment); `go run
# ./internal/testbed/cmd/dbcheck` then checks that the DSN's user can create
# and drop txmsg_* databases, and prints the GRANT statements a DBA must run
# when it cannot.
#
# Environment: TXMSG_MYSQL_PORT (13306), TXMSG_CACHE (<repo>/.cache). The
# user is txmsg, password txmsg, and the database txmsg_test (created empty
# at start with the server's defaults), as in the Makefile's TXMSG_DSN.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cache=${TXMSG_CACHE:-$root/.cache}
port=${TXMSG_MYSQL_PORT:-13306}
db=txmsg_test
user=txmsg
pass=txmsg
host=127.0.0.1

base=$cache/mysql/$port
datadir=$base/data
rundir=$base/run
socket=$rundir/mysqld.sock
pidfile=$rundir/mysqld.pid
errlog=$base/error.log

log() { printf 'mysql.sh: %s\n' "$*" >&2; }

[[ $port =~ ^[0-9]{2,5}$ ]] || { log "TXMSG_MYSQL_PORT must be a port number"; exit 2; }

# Settings the tests rely on; everything else is the server's default.
# The character set and collation are those Debian's packages configure
# (utf8mb4_general_ci; the compiled-in default is latin1). Short lock waits, so that a stuck check-back answers UNKNOWN quickly;
# room for many connections (every test opens pools of its own); a buffer
# pool that holds the benchmarks' tables.
server_args() {
	printf '%s\n' \
		--no-defaults \
		--user=root \
		--datadir="$datadir" \
		--socket="$socket" \
		--pid-file="$pidfile" \
		--log-error="$errlog" \
		--port="$port" \
		--bind-address=127.0.0.1 \
		--skip-name-resolve \
		--character-set-server=utf8mb4 \
		--collation-server=utf8mb4_general_ci \
		--max-connections=1000 \
		--innodb-lock-wait-timeout=10 \
		--innodb-flush-log-at-trx-commit=1 \
		--innodb-buffer-pool-size=512M
}

listening() { (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

server_pid() {
	local pid
	pid=$(cat "$pidfile" 2>/dev/null || true)
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

root_sql() { mysql --no-defaults --protocol=socket --socket="$socket" -u root "$@"; }
user_sql() { mysql --no-defaults --protocol=tcp -h "$host" -P "$port" -u "$user" -p"$pass" "$@"; }

answers() { root_sql -N -B -e 'SELECT 1' >/dev/null 2>&1; }

server_bin() {
	local b
	for b in mariadbd mysqld; do
		command -v "$b" >/dev/null 2>&1 && { command -v "$b"; return 0; }
		[ -x "/usr/sbin/$b" ] && { echo "/usr/sbin/$b"; return 0; }
	done
	return 1
}

# install_mariadb installs the server and client packages without letting
# the packages start the system's own server: the test bed never runs on
# the system's data directory or port.
install_mariadb() {
	if server_bin >/dev/null && command -v mysql >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		log "MariaDB is not installed and this is not root: install mariadb-server and mariadb-client (apt-get install mariadb-server mariadb-client), or set TXMSG_DSN to a server of your own"
		exit 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "MariaDB is not installed and apt-get is missing: install MariaDB >= 10.6 (server and client), or set TXMSG_DSN to a server of your own"
		exit 1
	fi
	log "installing mariadb-server and mariadb-client from the OS packages (the system's own server is not started)"
	local policy=/usr/sbin/policy-rc.d made_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	local status=0
	{ apt-get update -qq && apt-get install -y -qq --no-install-recommends mariadb-server mariadb-client; } >"$cache/mysql/apt.log" 2>&1 || status=$?
	[ $made_policy = 1 ] && rm -f "$policy"
	if [ $status != 0 ]; then
		log "apt-get failed (exit $status); its output:"
		tail -n 20 "$cache/mysql/apt.log" >&2
		exit 1
	fi
}

init_datadir() {
	log "creating a new data directory $datadir"
	mkdir -p "$datadir"
	mariadb-install-db --no-defaults --user=root --datadir="$datadir" \
		--auth-root-authentication-method=socket --skip-test-db >"$base/install.log" 2>&1 || {
		log "mariadb-install-db failed; its output:"
		tail -n 20 "$base/install.log" >&2
		rm -rf "$datadir"
		exit 1
	}
}

start_server() {
	mkdir -p "$base" "$rundir"
	install_mariadb
	[ -d "$datadir/mysql" ] || init_datadir
	local bin
	bin=$(server_bin)
	log "starting $(basename "$bin") on $host:$port (data directory $datadir)"
	# shellcheck disable=SC2046
	setsid nohup "$bin" $(server_args) </dev/null >>"$base/stdout.log" 2>&1 &
	local i
	for i in $(seq 1 600); do
		answers && return 0
		if [ $((i % 50)) = 0 ] && ! kill -0 $! 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	log "the server did not answer within 60 s; the end of $errlog:"
	tail -n 20 "$errlog" >&2 || true
	exit 1
}

stop_server() {
	local pid
	pid=$(server_pid) || { log "not running"; return 0; }
	log "stopping the server (pid $pid)"
	root_sql -e 'SHUTDOWN' >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
	local i
	for i in $(seq 1 600); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "the server did not stop within 60 s; killing it"
	kill -KILL "$pid" 2>/dev/null || true
}

# grant_sql is all this script ever grants: the user at the loopback hosts,
# on txmsg_* databases.
grant_sql() {
	cat <<SQL
CREATE USER IF NOT EXISTS '$user'@'localhost' IDENTIFIED BY '$pass';
CREATE USER IF NOT EXISTS '$user'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL PRIVILEGES ON \`txmsg\\_%\`.* TO '$user'@'localhost';
GRANT ALL PRIVILEGES ON \`txmsg\\_%\`.* TO '$user'@'127.0.0.1';
SQL
}

provision() {
	grant_sql | root_sql
	# The database takes the server's default character set and collation,
	# as a DBA's would; txmsg's tables set their own.
	user_sql -e "CREATE DATABASE IF NOT EXISTS \`$db\`" || {
		log "user $user cannot create $db on the test bed's server"
		exit 1
	}
}

info() {
	answers || { log "the server on $host:$port is not running (scripts/mysql.sh start)"; exit 1; }
	echo "server:  $(root_sql -N -B -e 'SELECT VERSION()') on $host:$port, pid $(server_pid || echo '?'), started by scripts/mysql.sh"
	echo "data:    $datadir (created $(stat -c %y "$datadir/mysql" 2>/dev/null | cut -d. -f1))"
	echo "config:  --no-defaults; $(root_sql -N -B -e "SELECT CONCAT('collation_server=', @@collation_server, ' isolation=', @@tx_isolation, ' lock_wait_timeout=', @@innodb_lock_wait_timeout, ' max_connections=', @@max_connections)")"
	echo "grants:"
	local u
	root_sql -N -B -e "SELECT CONCAT('''', User, '''@''', Host, '''') FROM mysql.user ORDER BY User, Host" | while read -r u; do
		root_sql -N -B -e "SHOW GRANTS FOR $u" | sed 's/IDENTIFIED BY PASSWORD .*/IDENTIFIED BY PASSWORD ****/; s/^/  /'
	done
	echo "databases: $(root_sql -N -B -e "SELECT GROUP_CONCAT(SCHEMA_NAME ORDER BY SCHEMA_NAME SEPARATOR ' ') FROM information_schema.SCHEMATA")"
}

# A port served by someone else's process: refuse rather than reuse.
foreign_port() {
	log "$host:$port is served by a process this script did not start; the test bed never uses another server."
	log "Stop it, or pick a free port for the test bed with TXMSG_MYSQL_PORT and TXMSG_DSN, or point the tests at that server with TXMSG_DSN (see docs/testing.md)."
	exit 1
}

mkdir -p "$cache/mysql"
case "${1:-start}" in
start)
	if server_pid >/dev/null && answers; then
		log "reusing the server this script started on $host:$port"
	elif listening; then
		foreign_port
	else
		start_server
	fi
	provision
	;;
stop)
	stop_server
	;;
restart)
	stop_server
	listening && foreign_port
	start_server
	;;
crash)
	pid=$(server_pid) || { log "the test bed's server is not running"; exit 1; }
	kill -KILL "$pid"
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	log "server (pid $pid) killed"
	start_server
	log "server answering again after crash recovery"
	;;
wipe)
	stop_server
	log "deleting $base"
	rm -rf "$base"
	;;
owns)
	server_pid >/dev/null && answers
	;;
status)
	if server_pid >/dev/null && answers; then echo "mysql: answering on $host:$port"; else echo "mysql: not answering on $host:$port"; exit 1; fi
	;;
info)
	info
	;;
dsn)
	echo "$user:$pass@tcp($host:$port)/$db?parseTime=true&loc=UTC&charset=utf8mb4"
	;;
*)
	echo "usage: $0 start|stop|restart|crash|wipe|status|owns|info|dsn" >&2
	exit 2
	;;
esac
