#!/usr/bin/env bash
# Starts (or reuses) the MySQL/MariaDB server that txmsg's tests, demo and
# benchmarks use, and creates the txmsg user and test database.
#
#   scripts/mysql.sh start    reuse a server on 127.0.0.1:3306, or install and start MariaDB
#   scripts/mysql.sh stop     stop the server only if this script started it
#   scripts/mysql.sh status   say whether the server answers
#   scripts/mysql.sh restart  restart the server this script started (used by the chaos suite)
#   scripts/mysql.sh owns     exit 0 when the running server was started by this script
#   scripts/mysql.sh crash    SIGKILL the server this script started and wait until it answers
#                             again (mysqld_safe restarts it; otherwise this script does)
#
# Without a server on the port: docker compose (service mysql of
# docker/compose.yml) when a Docker engine answers, else MariaDB from the OS
# packages (TXMSG_MYSQL_MODE=packages forces the latter).
#
# What it grants. The user exists only at localhost and 127.0.0.1 (never
# '%'), with privileges on the databases named txmsg_* only (`txmsg\_%`):
# the tests, the demo, txbench and txchaos create theirs with that prefix.
#   - A server this script started: it creates the user with those grants.
#   - A server it did not start (already listening on the port): it never
#     widens a grant there. It prints every statement before it runs it.
#     When the user can log in, it only creates TXMSG_MYSQL_DB as that user.
#     When the user does not exist and local root can log in through the
#     server's socket, it creates the user with the grants above. An existing
#     user that cannot log in, or a missing privilege, is left to the DBA:
#     the script prints the statements to run and exits 1.
#
# Environment: TXMSG_MYSQL_HOST (127.0.0.1), TXMSG_MYSQL_PORT (3306),
# TXMSG_MYSQL_SOCKET (the server's unix socket, for local root; by default the
# client's), TXMSG_MYSQL_DB (txmsg_test), TXMSG_MYSQL_USER /
# TXMSG_MYSQL_PASSWORD (txmsg/txmsg).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cache=${TXMSG_CACHE:-$root/.cache}
host=${TXMSG_MYSQL_HOST:-127.0.0.1}
port=${TXMSG_MYSQL_PORT:-3306}
db=${TXMSG_MYSQL_DB:-txmsg_test}
user=${TXMSG_MYSQL_USER:-txmsg}
pass=${TXMSG_MYSQL_PASSWORD:-txmsg}
socket=${TXMSG_MYSQL_SOCKET:-}
marker=$cache/mysql/started-by-txmsg

log() { printf 'mysql.sh: %s\n' "$*" >&2; }


answers() {
	# A TCP connect is not enough: the server must accept our user.
	if command -v mysqladmin >/dev/null 2>&1; then
		mysqladmin --protocol=tcp -h "$host" -P "$port" -u "$user" -p"$pass" ping >/dev/null 2>&1 && return 0
		mysqladmin ping >/dev/null 2>&1 && [ "$host" = 127.0.0.1 ] && return 0
		return 1
	fi
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

listening() { (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

root_sql() {
	# Local root through the unix socket (Debian's MariaDB default auth).
	mysql --protocol=socket ${socket:+--socket="$socket"} -u root "$@"
}

# root_ok: local root logs in, and on the server of $port, not on another
# one that happens to own the default socket.
root_ok() {
	command -v mysql >/dev/null 2>&1 || return 1
	[ "$(root_sql -N -B -e 'SELECT @@port' 2>/dev/null)" = "$port" ]
}

user_sql() {
	mysql --protocol=tcp -h "$host" -P "$port" -u "$user" -p"$pass" "$@"
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

# The database takes the server's default character set and collation, as a
# DBA's would; txmsg's tables set their own (utf8mb4, binary identifiers).
db_sql() {
	echo "CREATE DATABASE IF NOT EXISTS \`$db\`;"
}

# show prints what is about to run on the server, with the password masked.
show() {
	log "$1"
	sed -e "s/IDENTIFIED BY '[^']*'/IDENTIFIED BY '****'/" -e "s/IDENTIFIED BY PASSWORD '[^']*'/IDENTIFIED BY PASSWORD '****'/" -e 's/^/    /' >&2
}

# broad_grants prints the user's grants that reach beyond txmsg_*
# databases or beyond the loopback hosts (from an older version of this
# script, or a DBA); the script reports them and changes nothing.
broad_grants() {
	root_sql -N -B -e "SELECT CONCAT(User,'@',Host) FROM mysql.user WHERE User='$user' AND Host NOT IN ('localhost','127.0.0.1')" 2>/dev/null || true
	local h
	for h in localhost 127.0.0.1; do
		root_sql -N -B -e "SHOW GRANTS FOR '$user'@'$h'" 2>/dev/null | grep -E ' ON \*\.\* ' | grep -v 'GRANT USAGE ON' || true
	done
}

provision() {
	# The names go into SQL text: allow only what needs no quoting.
	[[ $user =~ ^[A-Za-z0-9_]{1,32}$ ]] || { log "TXMSG_MYSQL_USER must be letters, digits and _"; exit 2; }
	[[ $db =~ ^txmsg_[A-Za-z0-9_]{1,58}$ ]] || { log "TXMSG_MYSQL_DB must be txmsg_ followed by letters, digits and _ (the user's grants cover txmsg_* only)"; exit 2; }
	[[ $pass != *[\'\\]* ]] || { log "TXMSG_MYSQL_PASSWORD must not contain ' or \\"; exit 2; }
	if ! command -v mysql >/dev/null 2>&1; then
		log "no mysql client: cannot check user $user or create $db"
		return 0
	fi
	# The marker is written when this script starts MariaDB; local root must
	# also reach that server, or it is treated as someone else's.
	if [ -f "$marker" ] && root_ok; then
		provision_own
	else
		provision_foreign
	fi
}

# provision_own sets the user up on the server this script started.
provision_own() {
	{ grant_sql; db_sql; } | show "setting up user $user on the server this script started ($host:$port):"
	{ grant_sql; db_sql; } | root_sql
	local broad
	broad=$(broad_grants)
	if [ -n "$broad" ]; then
		printf '%s\n' "$broad" | show "note: $user also holds these wider grants, not made by this script version; revoke them if they are not needed:"
	fi
}

# provision_foreign never widens a grant on a server this script did not
# start.
provision_foreign() {
	if user_sql -e 'SELECT 1' >/dev/null 2>&1; then
		db_sql | show "the server on $host:$port was not started by this script; as $user it runs only:"
		db_sql | user_sql && return 0
		grant_sql | show "$user cannot create $db; a DBA can allow txmsg_* databases with:"
		exit 1
	fi
	if ! root_ok; then
		{ grant_sql; db_sql; } | show "cannot log in as $user on $host:$port (a server this script did not start); a DBA can create the user with:"
		exit 1
	fi
	local existing
	existing=$(root_sql -N -B -e "SELECT CONCAT(User,'@',Host) FROM mysql.user WHERE User='$user'")
	if [ -n "$existing" ]; then
		printf '%s\n' "$existing" | show "user $user exists on $host:$port but cannot log in with TXMSG_MYSQL_PASSWORD; it is left as it is:"
		log "set TXMSG_MYSQL_USER/TXMSG_MYSQL_PASSWORD to an account that can create txmsg_* databases"
		exit 1
	fi
	{ grant_sql; db_sql; } | show "the server on $host:$port was not started by this script; creating user $user there, as local root:"
	{ grant_sql; db_sql; } | root_sql
}

install_mariadb() {
	if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		log "no MySQL/MariaDB answers on $host:$port and this is not root: install mariadb-server (apt-get install mariadb-server) or start MySQL 8 there"
		exit 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "no MySQL/MariaDB answers on $host:$port and apt-get is missing: install MariaDB >= 10.6 or MySQL 8 and start it there"
		exit 1
	fi
	log "installing mariadb-server from the OS packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq mariadb-server mariadb-client >/dev/null
}

write_conf() {
	# Settings the tests rely on: TCP on loopback, short lock waits so a
	# stuck check-back answers UNKNOWN quickly, and room for many connections.
	mkdir -p /etc/mysql/mariadb.conf.d
	cat >/etc/mysql/mariadb.conf.d/90-txmsg.cnf <<CNF
[mysqld]
bind-address = 127.0.0.1
port = $port
max_connections = 1000
innodb_lock_wait_timeout = 10
innodb_flush_log_at_trx_commit = 1
innodb_buffer_pool_size = 512M
CNF
}

start_mariadb() {
	install_mariadb
	if pidof mariadbd >/dev/null 2>&1 || pidof mysqld >/dev/null 2>&1; then
		# A server runs, but not on $port: rewriting the system's config
		# and restarting it would move a server this script may not own.
		log "a MariaDB/MySQL server is already running, not on $host:$port; not reconfiguring it (set TXMSG_MYSQL_PORT to its port)"
		exit 1
	fi
	write_conf
	mkdir -p "$(dirname "$marker")"
	log "starting MariaDB"
	if command -v service >/dev/null 2>&1 && [ -x /etc/init.d/mariadb ]; then
		service mariadb start >/dev/null 2>&1 || service mariadb restart >/dev/null
	else
		mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
		setsid nohup mysqld_safe >/dev/null 2>&1 &
	fi
	touch "$marker"
	for _ in $(seq 1 60); do
		listening && return 0
		sleep 1
	done
	log "MariaDB did not start within 60 s; see /var/log/mysql or journal"
	exit 1
}

docker_ok() {
	command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && docker compose version >/dev/null 2>&1
}

start_docker() {
	log "starting MySQL 8 with docker compose (service mysql of docker/compose.yml)"
	docker compose --env-file "$here/versions.env" -f "$root/docker/compose.yml" up -d mysql >/dev/null
	for _ in $(seq 1 90); do
		mysql_tcp_ok && return 0
		sleep 1
	done
	log "MySQL in Docker did not accept $user within 90 s; see: docker compose -f docker/compose.yml logs mysql"
	exit 1
}

mysql_tcp_ok() {
	if command -v mysqladmin >/dev/null 2>&1; then
		mysqladmin --protocol=tcp -h "$host" -P "$port" -u "$user" -p"$pass" ping >/dev/null 2>&1
	else
		listening
	fi
}

case "${1:-start}" in
start)
	if listening; then
		log "reusing the server on $host:$port"
	elif [ "${TXMSG_MYSQL_MODE:-auto}" != packages ] && docker_ok; then
		start_docker
	else
		start_mariadb
	fi
	provision
	for _ in $(seq 1 30); do
		answers && break
		sleep 1
	done
	answers || { log "the server on $host:$port does not accept user $user"; exit 1; }
	echo "TXMSG_DSN=$user:$pass@tcp($host:$port)/$db?parseTime=true&loc=UTC&charset=utf8mb4"
	;;
stop)
	if [ -f "$marker" ]; then
		log "stopping MariaDB"
		if [ -x /etc/init.d/mariadb ]; then service mariadb stop >/dev/null; else mysqladmin -u root shutdown; fi
		rm -f "$marker"
	else
		log "not started by this script; leaving it alone"
	fi
	;;
restart)
	[ -f "$marker" ] || { log "not started by this script; refusing to restart it"; exit 1; }
	service mariadb restart >/dev/null
	;;
crash)
	[ -f "$marker" ] || { log "not started by this script; refusing to crash it"; exit 1; }
	pid=$(cat /run/mysqld/mysqld.pid 2>/dev/null || pidof -s mariadbd || pidof -s mysqld || true)
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then log "no running server found"; exit 1; fi
	kill -KILL "$pid"
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	log "server (pid $pid) killed"
	# mysqld_safe restarts a server that died without removing its pid file.
	for _ in $(seq 1 150); do listening && break; sleep 0.1; done
	listening || start_mariadb
	for _ in $(seq 1 60); do answers && break; sleep 1; done
	answers || { log "the server did not come back after the crash"; exit 1; }
	log "server answering again"
	;;
owns)
	[ -f "$marker" ] && listening
	;;
status)
	if answers; then echo "mysql: answering on $host:$port"; else echo "mysql: not answering on $host:$port"; exit 1; fi
	;;
*)
	echo "usage: $0 start|stop|status|restart|crash|owns" >&2
	exit 2
	;;
esac
