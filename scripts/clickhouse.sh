#!/usr/bin/env bash
# Runs a ClickHouse server for the tests of exporter/clickhouse on 127.0.0.1.
#
#   scripts/clickhouse.sh start    install (apt-get) when missing, start, wait for /ping,
#                                  print "export MCPAUDIT_CLICKHOUSE_DSN=..." on stdout
#   scripts/clickhouse.sh stop     stop the server started here (SIGTERM, then SIGKILL)
#   scripts/clickhouse.sh restart  stop, then start on the same data
#   scripts/clickhouse.sh kill     SIGKILL the server, as a crash would
#   scripts/clickhouse.sh status   exit 0 when it answers /ping
#   scripts/clickhouse.sh env      print the exports without starting anything
#
# Typical use: eval "$(scripts/clickhouse.sh start)"; trap 'scripts/clickhouse.sh stop' EXIT.
#
# Everything lives under MCPAUDIT_CLICKHOUSE_DIR (default /tmp/mcpaudit-clickhouse): config,
# data, logs and the pid file. Ports: MCPAUDIT_CLICKHOUSE_TCP_PORT (default 19000) and
# MCPAUDIT_CLICKHOUSE_HTTP_PORT (default 18123); "auto" picks free ones, which the printed
# exports carry to later calls. Test runs that may overlap (several developers on one machine)
# each use their own directory and auto ports, so that one run never stops another's server.
# Every wait is bounded. There is no systemd on the machines of this project: the server is a
# plain background process of this script.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${MCPAUDIT_CLICKHOUSE_DIR:-/tmp/mcpaudit-clickhouse}
tcp_port=${MCPAUDIT_CLICKHOUSE_TCP_PORT:-19000}
http_port=${MCPAUDIT_CLICKHOUSE_HTTP_PORT:-18123}
pidfile=$dir/clickhouse-server.pid

log() { echo "clickhouse.sh: $*" >&2; }

# pick_port prints a port nothing listens on, other than $1, below the kernel's ephemeral range
# (ip_local_port_range): a port in it may be the local end of some connection, which nothing
# listens on but which the server then cannot bind (found in CI: "Address already in use").
pick_port() {
	local p i lo=32768 span
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	[ "$lo" -gt 21000 ] 2>/dev/null || lo=32768
	span=$((lo - 20000))
	for i in $(seq 1 200); do
		p=$((20000 + RANDOM % span))
		[ "$p" = "${1:-}" ] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	log "no free port found"
	return 1
}
auto_ports=
[ "$tcp_port" = auto ] && auto_ports=1 && tcp_port=$(pick_port)
[ "$http_port" = auto ] && auto_ports=1 && http_port=$(pick_port "$tcp_port")

ping_ok() {
	# /ping answers "Ok." once the server accepts queries. bash's /dev/tcp avoids needing curl.
	local reply
	reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$http_port && printf 'GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && cat <&3" 2>/dev/null) || return 1
	[[ $reply == *"Ok."* ]]
}

running_pid() {
	local pid
	[ -f "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	echo "$pid"
}

print_env() {
	echo "export MCPAUDIT_CLICKHOUSE_DSN=clickhouse://127.0.0.1:$tcp_port/default"
	echo "export MCPAUDIT_CLICKHOUSE_CTL=$root/scripts/clickhouse.sh"
	echo "export MCPAUDIT_CLICKHOUSE_DIR=$dir"
	echo "export MCPAUDIT_CLICKHOUSE_TCP_PORT=$tcp_port"
	echo "export MCPAUDIT_CLICKHOUSE_HTTP_PORT=$http_port"
}

install() {
	command -v clickhouse-server >/dev/null 2>&1 && return 0
	if [ "$(id -u)" != 0 ]; then
		log "clickhouse-server is missing; install it as root: apt-get install clickhouse-server clickhouse-client"
		exit 1
	fi
	log "installing clickhouse-server with apt-get"
	timeout 300 apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends \
		clickhouse-server clickhouse-client >/dev/null
}

start() {
	if running_pid >/dev/null && ping_ok; then
		print_env
		return 0
	fi
	install
	mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
	sed -e "s|@DIR@|$dir|g" -e "s|@TCP_PORT@|$tcp_port|g" -e "s|@HTTP_PORT@|$http_port|g" \
		"$root/deploy/clickhouse/test-config.xml" >"$dir/config.xml"
	cp "$root/deploy/clickhouse/users.xml" "$dir/users.xml"
	# The server writes its own pid file only as a daemon; run it in the background here so
	# that $! is its pid, detached from this shell's stdin and stdout.
	(cd "$dir" && exec clickhouse-server --config-file="$dir/config.xml" \
		</dev/null >>"$dir/log/stdout.log" 2>&1) &
	echo $! >"$pidfile"
	local pid=$! i
	for i in $(seq 1 300); do # 30 s at most
		if ping_ok; then
			log "started (pid $pid, tcp 127.0.0.1:$tcp_port, http 127.0.0.1:$http_port, dir $dir)"
			print_env
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			# A port picked free was taken before the server bound it: with auto ports, pick
			# others and start again (at most 3 times).
			if [ -n "$auto_ports" ] && [ "${start_tries:-0}" -lt 3 ] &&
				grep -q "Address already in use" "$dir/log/clickhouse-server.err.log" 2>/dev/null; then
				start_tries=$((${start_tries:-0} + 1))
				log "a port was taken before the server bound it; picking others (try $start_tries of 3)"
				: >"$dir/log/clickhouse-server.err.log"
				tcp_port=$(pick_port)
				http_port=$(pick_port "$tcp_port")
				rm -f "$pidfile"
				start
				return
			fi
			log "the server exited at start; last log lines:"
			tail -n 20 "$dir/log/clickhouse-server.err.log" "$dir/log/stdout.log" >&2 2>/dev/null || true
			exit 1
		fi
		sleep 0.1
	done
	log "no answer to /ping within 30 s"
	stop
	exit 1
}

stop() {
	local pid i
	pid=$(running_pid) || { rm -f "$pidfile"; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 150); do # 15 s, then SIGKILL
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "server $pid ignored SIGTERM for 15 s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		for i in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$pidfile"
	log "stopped"
}

crash() {
	local pid i
	pid=$(running_pid) || return 0
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	rm -f "$pidfile"
	log "killed"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart) stop && start ;;
kill) crash ;;
status) running_pid >/dev/null && ping_ok ;;
env) print_env ;;
*)
	echo "usage: $0 start|stop|restart|kill|status|env" >&2
	exit 2
	;;
esac
