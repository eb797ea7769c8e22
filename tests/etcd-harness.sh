#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Run "$@" against a private etcd on 127.0.0.1: one member, or
# $ETCD_MEMBERS members forming one cluster.
#
# Starts etcd on free loopback ports with its data in a temp dir, waits
# (bounded) until every member's /health answers true, exports
#   LEASEFS_ETCD_ENDPOINTS=127.0.0.1:PORT[,...]  (client endpoints)
#   ETCD_PID        first member (so tests may SIGSTOP/SIGCONT it)
#   ETCD_PIDS, ETCD_CLIENT_URLS   all members, in endpoint order
#   ETCD_CLIENT_URL, ETCD_DATA_DIR   of the first member
# With ETCD_TLS=1 the client URLs are https with client-certificate auth,
# from a throwaway CA; exports LEASEFS_ETCD_CA, LEASEFS_ETCD_CERT and
# LEASEFS_ETCD_KEY (the client's files).
# runs the command, then stops every member by its pid.  Exits with the
# command's status; 77 (skip) if etcd is not installed, 99 if etcd cannot
# be started.
set -u

ETCD_BIN=${ETCD_BIN:-$(command -v etcd || true)}
if [ -z "$ETCD_BIN" ]; then
	echo "etcd-harness: etcd not installed; skipping" >&2
	exit 77
fi
if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi

members=${ETCD_MEMBERS:-1}
tls=${ETCD_TLS:-0}
# etcd reads ETCD_* variables as flags: keep ours out of its environment.
unset ETCD_MEMBERS ETCD_TLS
scheme=http
tls_flags=()
curl_tls=()
workdir=$(mktemp -d "${TMPDIR:-/tmp}/leasefs-etcd-XXXXXX") || exit 99
etcd_pids=

cleanup() {
	local pid
	for pid in $etcd_pids; do
		# A test may have left it stopped; it must be running to exit.
		kill -CONT "$pid" 2>/dev/null
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in $etcd_pids; do
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A CA, a server certificate for 127.0.0.1 and a client certificate.
make_certs() {
	local d=$workdir/pki
	mkdir -p "$d" || return 1
	gen() { # name subject extensions [signing args...]
		local n=$1 subj=$2 ext=$3
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-keyout "$d/$n.key" -out "$d/$n.csr" -subj "$subj" &&
		openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
			-CAcreateserial -out "$d/$n.crt" -days 1 \
			-extfile <(printf '%s\n' "$ext")
	}
	{
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
			-nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 1 \
			-subj /CN=leasefs-test-ca &&
		gen server /CN=127.0.0.1 \
			"subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth,clientAuth" &&
		gen client /CN=leasefs-test-client "extendedKeyUsage=clientAuth"
	} >"$workdir/pki.log" 2>&1 || return 1
	LEASEFS_ETCD_CA=$d/ca.crt LEASEFS_ETCD_CERT=$d/client.crt LEASEFS_ETCD_KEY=$d/client.key
	scheme=https
	tls_flags=(--cert-file "$d/server.crt" --key-file "$d/server.key"
		--trusted-ca-file "$d/ca.crt" --client-cert-auth)
	curl_tls=(--cacert "$d/ca.crt" --cert "$d/client.crt" --key "$d/client.key")
	export LEASEFS_ETCD_CA LEASEFS_ETCD_CERT LEASEFS_ETCD_KEY
}

# N distinct ports the kernel reports free right now.
free_ports() {
	python3 -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
' "$1"
}

# Poll /health until it reports true; bounded to ~15 s.  Fails early if
# the member exited (e.g. a port was taken meanwhile).
wait_healthy() {
	local url=$1 pid=$2
	for _ in $(seq 1 150); do
		kill -0 "$pid" 2>/dev/null || return 1
		if curl -s "${curl_tls[@]}" --max-time 1 "$url/health" 2>/dev/null |
			grep -q '"health":"true"'; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

stop_members() {
	local pid
	for pid in $etcd_pids; do
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	etcd_pids=
}

# Start the members; on success sets etcd_pids, client_urls, endpoints.
start_cluster() {
	local ports i cluster= cport pport url pid
	read -r -a ports < <(free_ports $((2 * members))) || return 1
	for ((i = 0; i < members; i++)); do
		cluster+="${cluster:+,}m$i=http://127.0.0.1:${ports[2 * i + 1]}"
	done
	client_urls= endpoints=
	for ((i = 0; i < members; i++)); do
		cport=${ports[2 * i]} pport=${ports[2 * i + 1]}
		url=$scheme://127.0.0.1:$cport
		rm -rf "$workdir/data$i"
		"$ETCD_BIN" --name "m$i" \
			--data-dir "$workdir/data$i" \
			--listen-client-urls "$url" \
			--advertise-client-urls "$url" \
			--listen-peer-urls "http://127.0.0.1:$pport" \
			--initial-advertise-peer-urls "http://127.0.0.1:$pport" \
			--initial-cluster "$cluster" \
			--initial-cluster-token "leasefs-$$" \
			--initial-cluster-state new "${tls_flags[@]}" \
			>"$workdir/etcd$i.log" 2>&1 &
		etcd_pids+="${etcd_pids:+ }$!"
		client_urls+="${client_urls:+ }$url"
		endpoints+="${endpoints:+,}127.0.0.1:$cport"
	done
	i=0
	for pid in $etcd_pids; do
		i=$((i + 1))
		url=$(echo "$client_urls" | cut -d' ' -f$i)
		if ! wait_healthy "$url" "$pid"; then
			stop_members
			return 1
		fi
	done
	return 0
}

if [ "$tls" = 1 ] && ! make_certs; then
	echo "etcd-harness: cannot make test certificates:" >&2
	cat "$workdir/pki.log" >&2
	exit 99
fi

started=
for _ in 1 2 3; do
	if start_cluster; then
		started=1
		break
	fi
done
if [ -z "$started" ]; then
	echo "etcd-harness: etcd did not become healthy; log:" >&2
	tail -n 30 "$workdir"/etcd*.log >&2
	exit 99
fi

export LEASEFS_ETCD_ENDPOINTS=$endpoints
export ETCD_PIDS=$etcd_pids
export ETCD_PID=${etcd_pids%% *}
export ETCD_CLIENT_URLS=$client_urls
export ETCD_CLIENT_URL=${client_urls%% *}
export ETCD_DATA_DIR=$workdir/data0
export ETCDCTL_API=3

"$@"
exit $?
