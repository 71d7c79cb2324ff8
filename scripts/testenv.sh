#!/usr/bin/env bash
# testenv.sh — run a command with throwaway test backends.
#
#   scripts/testenv.sh [--check] [COMMAND [ARG...]]
#
# Starts, when the machine has them and the caller has not already provided
# one:
#   * a PostgreSQL cluster (newest /usr/lib/postgresql/*/bin) in a temp dir on
#     a free loopback port, fsync off, with a database "gyre_test"; exports
#     GYRE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/gyre_test?sslmode=disable
#   * moto_server (S3) on a free loopback port with a bucket "gyre-test";
#     exports GYRE_TEST_S3_URL=s3://gyre-test?endpoint=…&use_path_style=true&region=us-east-1
#     and dummy AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION.
# and, when Chromium (the web UI's browser tests) is missing and this runs
# as root with apt-get, installs Debian's chromium first.
# then runs COMMAND with those variables, stops everything and removes the
# temp dir whatever happens, and exits with COMMAND's status.
#
# A variable the caller already set is used as is and its server is not
# started. A missing server binary prints a notice and the tests skip
# (or fail, under GYRE_REQUIRE_POSTGRES=1 / GYRE_REQUIRE_S3=1). A server that
# is there but fails to start is an error, with its log shown.
#
# GYRE_TESTENV_PG_OPTS adds server options, e.g.
# "-c shared_preload_libraries=pg_stat_statements" to see where a benchmark's
# statement time goes.
#
# --check verifies the backends answer (psql "select 1", an S3 bucket
# listing) before running COMMAND (which is then optional).
set -euo pipefail

log() { printf 'testenv: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

check=0
if [[ ${1:-} == --check ]]; then
	check=1
	shift
fi
if [[ $# -eq 0 && $check -eq 0 ]]; then
	die "usage: $0 [--check] COMMAND [ARG...]"
fi

START_TIMEOUT=${GYRE_TESTENV_TIMEOUT:-60} # seconds to wait for each server

work=$(mktemp -d "${TMPDIR:-/tmp}/gyre-testenv.XXXXXX")
# The postgres user must be able to reach its directory inside.
chmod 0711 "$work"

pg_bin=""
pg_data=""
pg_as=()
pg_extra_dir=""
moto_pid=""
cmd_pid=""

cleanup() {
	local status=$?
	set +e
	if [[ -n $cmd_pid ]]; then
		kill "$cmd_pid" 2>/dev/null
		wait "$cmd_pid" 2>/dev/null
	fi
	if [[ -n $moto_pid ]]; then
		kill "$moto_pid" 2>/dev/null
		wait "$moto_pid" 2>/dev/null
	fi
	if [[ -n $pg_data && -f $pg_data/postmaster.pid ]]; then
		"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
			log "could not stop PostgreSQL (data dir $pg_data)"
	fi
	rm -rf "$work" ${pg_extra_dir:+"$pg_extra_dir"}
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# show_log FILE: print the tail of a server log to stderr.
show_log() {
	log "---- last lines of $1 ----"
	tail -n 40 "$1" >&2 || true
	log "----"
}

# free_port prints a TCP port nobody listens on at 127.0.0.1 right now.
free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
		return
	fi
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

start_postgres() {
	if [[ -n ${GYRE_TEST_POSTGRES_URL:-} ]]; then
		log "PostgreSQL: using the caller's GYRE_TEST_POSTGRES_URL"
		return
	fi
	# The newest version wins: sort -V puts it last.
	local d
	while IFS= read -r d; do
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]; then
			pg_bin=$d
		fi
	done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
	if [[ -z $pg_bin ]]; then
		log "NOTICE: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin:" \
			"PostgreSQL tests will SKIP (or FAIL under GYRE_REQUIRE_POSTGRES=1)"
		return
	fi
	local dir=$work/pg
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 ||
			die "running as root but there is no 'postgres' user to run PostgreSQL as"
		local runuser
		runuser=$(command -v runuser || echo /usr/sbin/runuser)
		[[ -x $runuser ]] || die "running as root but runuser (util-linux) is not installed"
		pg_as=("$runuser" -u postgres --)
		# The postgres user must reach the data dir (TMPDIR may be private).
		if ! "${pg_as[@]}" test -x "$work"; then
			dir=$(mktemp -d /tmp/gyre-testenv-pg.XXXXXX)
			pg_extra_dir=$dir
		fi
		mkdir -p "$dir/sock"
		chown -R postgres: "$dir"
	else
		mkdir -p "$dir/sock"
	fi
	pg_data=$dir/data
	local port logf=$dir/postgres.log
	if ! (cd "$dir" && "${pg_as[@]}" "$pg_bin/initdb" -D "$pg_data" -U postgres -A trust \
		-E UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1); then
		show_log "$dir/initdb.log"
		die "initdb failed"
	fi
	local try
	for try in 1 2 3; do
		port=$(free_port)
		if (cd "$dir" && "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_data" -l "$logf" -w -t "$START_TIMEOUT" \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 ${GYRE_TESTENV_PG_OPTS:-}" \
			start >/dev/null 2>&1); then
			break
		fi
		# A port taken between free_port and bind: try another.
		if [[ $try -eq 3 ]]; then
			show_log "$logf"
			die "PostgreSQL did not start within ${START_TIMEOUT}s"
		fi
		"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_data" -m immediate stop >/dev/null 2>&1 || true
	done
	if ! (cd "$dir" && "${pg_as[@]}" "$pg_bin/createdb" -h "$dir/sock" -p "$port" -U postgres gyre_test) 2>>"$logf"; then
		show_log "$logf"
		die "createdb failed"
	fi
	export GYRE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/gyre_test?sslmode=disable"
	log "$("$pg_bin/postgres" --version) on 127.0.0.1:$port (log $logf)"
}

start_s3() {
	if [[ -n ${GYRE_TEST_S3_URL:-} ]]; then
		log "S3: using the caller's GYRE_TEST_S3_URL"
		return
	fi
	local cmd=()
	if command -v moto_server >/dev/null 2>&1; then
		cmd=(moto_server)
	elif command -v python3 >/dev/null 2>&1 && python3 -c 'import moto.server' >/dev/null 2>&1; then
		cmd=(python3 -m moto.server)
	else
		log "NOTICE: moto_server not found: S3 tests will SKIP (or FAIL under GYRE_REQUIRE_S3=1)"
		return
	fi
	if ! command -v curl >/dev/null 2>&1; then
		log "NOTICE: curl not found (needed to create the test bucket): S3 tests will SKIP (or FAIL under GYRE_REQUIRE_S3=1)"
		return
	fi
	local port logf=$work/moto.log
	port=$(free_port)
	"${cmd[@]}" -H 127.0.0.1 -p "$port" >"$logf" 2>&1 </dev/null &
	moto_pid=$!
	local endpoint=http://127.0.0.1:$port deadline=$((SECONDS + START_TIMEOUT))
	until curl -fsS -o /dev/null --max-time 2 "$endpoint/" 2>/dev/null; do
		if ! kill -0 "$moto_pid" 2>/dev/null; then
			moto_pid=""
			show_log "$logf"
			die "moto_server exited during start"
		fi
		if ((SECONDS >= deadline)); then
			show_log "$logf"
			die "moto_server did not answer within ${START_TIMEOUT}s"
		fi
		sleep 0.2
	done
	# moto accepts any credentials; never hand a caller's real ones to it.
	export AWS_ACCESS_KEY_ID=gyre-test AWS_SECRET_ACCESS_KEY=gyre-test AWS_REGION=us-east-1
	unset AWS_SESSION_TOKEN AWS_PROFILE
	if ! curl -fsS -o /dev/null --max-time 10 -X PUT "$endpoint/gyre-test"; then
		show_log "$logf"
		die "could not create the test bucket"
	fi
	export GYRE_TEST_S3_URL="s3://gyre-test?endpoint=$endpoint&use_path_style=true&region=us-east-1"
	log "S3 (moto) on $endpoint, bucket gyre-test (log $logf)"
}

self_check() {
	local ok=1
	if [[ -n ${GYRE_TEST_POSTGRES_URL:-} ]]; then
		if psql "$GYRE_TEST_POSTGRES_URL" -X -q -t -A -c 'select 1' | grep -qx 1; then
			log "check: PostgreSQL answers select 1"
		else
			log "check: PostgreSQL FAILED"
			ok=0
		fi
	else
		log "check: no PostgreSQL"
	fi
	if [[ -n ${GYRE_TEST_S3_URL:-} ]]; then
		local endpoint bucket
		endpoint=$(sed -n 's/.*[?&]endpoint=\([^&]*\).*/\1/p' <<<"$GYRE_TEST_S3_URL")
		bucket=$(sed -n 's|^s3://\([^?/]*\).*|\1|p' <<<"$GYRE_TEST_S3_URL")
		if [[ -n $endpoint ]] && curl -fsS -o /dev/null --max-time 10 "$endpoint/$bucket?list-type=2"; then
			log "check: S3 lists bucket $bucket"
		else
			log "check: S3 FAILED (or no endpoint= to check)"
			ok=0
		fi
	else
		log "check: no S3"
	fi
	[[ $ok -eq 1 ]] || die "self-check failed"
}

# ensure_browser installs Debian's chromium for the web UI's browser tests
# when no Chromium is on PATH and apt-get can run; otherwise those tests
# skip (or fail under GYRE_REQUIRE_BROWSER=1).
ensure_browser() {
	local b
	for b in chromium chromium-browser google-chrome google-chrome-stable; do
		command -v "$b" >/dev/null 2>&1 && return 0
	done
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		log "installing chromium for the browser tests (apt-get)"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >&2 ||
			log "NOTICE: installing chromium failed: browser tests will SKIP (or FAIL under GYRE_REQUIRE_BROWSER=1)"
	else
		log "NOTICE: no chromium: browser tests will SKIP (or FAIL under GYRE_REQUIRE_BROWSER=1)"
	fi
}

ensure_browser
start_postgres
start_s3
if [[ $check -eq 1 ]]; then
	self_check
fi
if [[ $# -gt 0 ]]; then
	# In the background, so that a signal to this script runs the cleanup
	# at once (bash runs traps only between foreground commands); <&0 keeps
	# stdin, which a background command would otherwise lose.
	"$@" <&0 &
	cmd_pid=$!
	set +e
	wait "$cmd_pid"
	status=$?
	set -e
	cmd_pid=""
	exit "$status"
fi
