#!/usr/bin/env bash
# hack/lab-outside.sh [zerodrop lab flags…]
#
# Runs `zerodrop lab` and, for every run, an independent client
# (hack/openloop, no code shared with the lab) in the lab's client namespace
# against the frontend the lab prints, from the run's "traffic start" line to
# its "traffic end" line. Prints, per run, the failure rate the lab counted and the
# one the outside client counted, and the outside client's first and last
# error. Needs root, like the lab. RATE (default 200) is the lab's --rate;
# OUT_RATE (default 151) the outside client's: not the same rate, because two
# open-loop streams in lockstep through HAProxy's round robin would each meet
# a fixed subset of the servers (with two servers, one stream would always
# get one of them), so a dead server would fail one client and spare the
# other. OUT_DIR keeps each run's JSON (default: a temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${RATE:-200}"
out_rate="${OUT_RATE:-151}"
tmp="$(mktemp -d)"
out_dir="${OUT_DIR:-$tmp}"
mkdir -p "$out_dir"
cleanup() {
	jobs -p | xargs -r kill 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -tags lab -o "$tmp/zerodrop" ./cmd/zerodrop
go build -o "$tmp/openloop" ./hack/openloop

printf '%-40s %10s %10s %10s %10s\n' run lab_reqs lab_fail% out_reqs out_fail%
pid="" run="" n=0
{ "$tmp/zerodrop" lab --rate "$rate" "$@" 2>&1 1>"$tmp/table.txt" || true; } | while IFS= read -r line; do
	echo "$line" >>"$tmp/lab.err"
	what="$(sed -E 's/^\[[^]]*\] +([^ ]+) +([^ ]+) +([^ ]+) .*/\1 \2 \3/' <<<"$line")"
	case "$line" in
	*"traffic start frontend="*)
		fe="${line##*frontend=}" && fe="${fe%% *}"
		ns="${line##*netns=}" && ns="${ns%% *}"
		run="$what"
		n=$((n + 1))
		out="$out_dir/outside-$n.json"
		ip netns exec "$ns" "$tmp/openloop" --url "http://$fe/" --rate "$out_rate" --duration 10m --timeout 2s >"$out" &
		pid=$!
		;;
	*" traffic end"*)
		# The lab's schedule ends; its requests in flight finish, then the
		# teardown.
		[ -n "$pid" ] || continue
		kill -INT "$pid" && wait "$pid" || true
		pid=""
		;;
	*" done: "* | *" error: "*)
		if [ -n "$pid" ]; then
			kill -INT "$pid" && wait "$pid" || true
			pid=""
		fi
		[ -n "$run" ] || continue
		lab_reqs="$(sed -nE 's/.* done: ([0-9]+) requests, ([0-9]+) failed.*/\1/p' <<<"$line")"
		lab_fail="$(sed -nE 's/.* done: ([0-9]+) requests, ([0-9]+) failed.*/\2/p' <<<"$line")"
		out_reqs="$(sed -nE 's/.*"requests":([0-9]+).*/\1/p' "$out")"
		out_fail="$(sed -nE 's/.*"failure_rate":([0-9.e+-]+).*/\1/p' "$out")"
		if [ -n "$lab_reqs" ] && [ "$lab_reqs" -gt 0 ]; then
			lab_rate="$(awk -v f="$lab_fail" -v n="$lab_reqs" 'BEGIN { printf "%.2f", 100 * f / n }')"
		else
			lab_rate="error"
		fi
		printf '%-40s %10s %10s %10s %10.2f\n' "$run" "${lab_reqs:-0}" "$lab_rate" "${out_reqs:-0}" "${out_fail:-0}"
		run=""
		sed -nE 's/.*"first_error":"(([^"\\]|\\.)*)".*/    first error: \1/p' "$out"
		sed -nE 's/.*"last_error":"(([^"\\]|\\.)*)".*/    last error:  \1/p' "$out"
		;;
	esac
done
cat "$tmp/table.txt"
