#!/usr/bin/env bash
# A local 3-master Redis Cluster on loopback for the tests (the Redis strategy runs its contract
# suite against it). Idempotent: starts the nodes that are not running, joins them if they are
# not yet a cluster, waits for cluster_state:ok, then prints the ports.
#
#   bash scripts/redis-cluster.sh          start (or check) the cluster
#   bash scripts/redis-cluster.sh stop     stop its nodes (their files stay under .tmp/)
#
# Ports: RL_CLUSTER_PORTS (default "7101 7102 7103"); each node also uses port + 10000 for the
# cluster bus. Files live in .tmp/redis-cluster/ (gitignored). No persistence: a restarted node
# comes back empty, which is what the tests want.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a ports <<<"${RL_CLUSTER_PORTS:-7101 7102 7103}"
dir="$PWD/.tmp/redis-cluster"
host=127.0.0.1

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "redis-cluster.sh: redis-server and redis-cli are needed: apt-get install -y redis-server (or brew install redis)" >&2
  exit 1
fi

cli() { redis-cli -h "$host" -p "$1" "${@:2}"; }
up() { [ "$(cli "$1" ping 2>/dev/null)" = "PONG" ]; }
state() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p'; }
known() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_known_nodes://p'; }

if [ "${1:-start}" = "stop" ]; then
  for p in "${ports[@]}"; do
    if up "$p"; then cli "$p" shutdown nosave >/dev/null 2>&1 || true; fi
  done
  echo "redis cluster stopped: ${ports[*]}"
  exit 0
fi

mkdir -p "$dir"
for p in "${ports[@]}"; do
  if up "$p"; then continue; fi
  redis-server --port "$p" --bind "$host" --protected-mode yes --daemonize yes \
    --dir "$dir" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 5000 \
    --save "" --appendonly no --pidfile "$dir/redis-$p.pid" --logfile "$dir/redis-$p.log"
done
for p in "${ports[@]}"; do
  for _ in $(seq 1 50); do up "$p" && break; sleep 0.1; done
  up "$p" || { echo "redis-cluster.sh: node $p did not start, see $dir/redis-$p.log" >&2; exit 1; }
done

first="${ports[0]}"
if [ "$(state "$first")" != "ok" ]; then
  # Nodes that know no one are fresh: join them. Nodes that know each other are a cluster
  # still settling (just restarted): give it time before calling it broken.
  fresh=1
  for p in "${ports[@]}"; do [ "$(known "$p")" = "1" ] || fresh=0; done
  if [ "$fresh" = 1 ]; then
    addresses=()
    for p in "${ports[@]}"; do addresses+=("$host:$p"); done
    redis-cli --cluster create "${addresses[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
      { cat "$dir/create.log" >&2; exit 1; }
  fi
fi

for _ in $(seq 1 100); do
  ok=1
  for p in "${ports[@]}"; do [ "$(state "$p")" = "ok" ] || ok=0; done
  [ "$ok" = 1 ] && break
  sleep 0.1
done
for p in "${ports[@]}"; do
  if [ "$(state "$p")" != "ok" ]; then
    echo "redis-cluster.sh: node $p reports cluster_state:$(state "$p"); to rebuild: bash scripts/redis-cluster.sh stop && rm -rf .tmp/redis-cluster" >&2
    exit 1
  fi
done
echo "redis cluster ok on $host: ${ports[*]}"
