#!/usr/bin/env bash
# Installs headless Chromium from the OS packages for the dashboard's
# browser tests (dashboard/browsertest), the way scripts/mysql.sh installs
# MariaDB. Idempotent: does nothing when a Chromium or Chrome is on PATH.
#
#   scripts/chromium.sh          install if missing, then print the binary's path
#   scripts/chromium.sh path     print the binary's path, or exit 1
#
# The browser tests find the binary on PATH (chromium, chromium-browser,
# google-chrome) or in $TXMSG_CHROMIUM.
set -euo pipefail

log() { printf 'chromium.sh: %s\n' "$*" >&2; }

find_browser() {
	if [ -n "${TXMSG_CHROMIUM:-}" ] && [ -x "$TXMSG_CHROMIUM" ]; then
		echo "$TXMSG_CHROMIUM"
		return 0
	fi
	for b in chromium chromium-browser google-chrome google-chrome-stable headless_shell; do
		if p=$(command -v "$b" 2>/dev/null); then
			echo "$p"
			return 0
		fi
	done
	return 1
}

case "${1:-install}" in
path)
	find_browser
	;;
install)
	if p=$(find_browser); then
		log "found $p"
		echo "$p"
		exit 0
	fi
	if [ "$(id -u)" != 0 ]; then
		log "no Chromium on PATH and this is not root: install it (apt-get install chromium) or set TXMSG_CHROMIUM"
		exit 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "no Chromium on PATH and apt-get is missing: install Chromium or Chrome, or set TXMSG_CHROMIUM"
		exit 1
	fi
	log "installing chromium from the OS packages"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# Debian names the package chromium; Ubuntu's chromium-browser is a snap
	# wrapper, tried second.
	apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null 2>&1 ||
		apt-get install -y -qq --no-install-recommends chromium-browser fonts-liberation >/dev/null
	p=$(find_browser) || { log "chromium was installed but is not on PATH"; exit 1; }
	log "installed $p"
	echo "$p"
	;;
*)
	echo "usage: $0 [install|path]" >&2
	exit 2
	;;
esac
