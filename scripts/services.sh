#!/usr/bin/env bash
# Makes sure every server the tests need is installed and running, starting what is down.
# Redis (6379), PostgreSQL (5432, database "test") and MariaDB (3306, root without a password,
# database "test") are expected to be installed; memcached and the test Redis Cluster are
# installed/started by their own scripts. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "services: $1" >&2
  exit 1
}

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  command -v redis-server >/dev/null || fail "redis-server is not installed: run 'apt-get install -y redis-server'"
  mkdir -p .tmp/redis-6379
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir "$PWD/.tmp/redis-6379" \
    --logfile "$PWD/.tmp/redis-6379/redis.log"
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || fail "redis-server did not start on 127.0.0.1:6379"
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  command -v pg_ctlcluster >/dev/null || fail "PostgreSQL is not installed: run 'apt-get install -y postgresql'"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  for _ in $(seq 1 100); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.1; done
  pg_isready -h 127.0.0.1 -p 5432 -q || fail "PostgreSQL did not start on 127.0.0.1:5432"
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = 'test'" | grep -q 1; then
  createdb -h 127.0.0.1 -U postgres test
fi

if ! mariadb -h 127.0.0.1 -uroot -e 'select 1' >/dev/null 2>&1; then
  [ -x /usr/sbin/mariadbd ] || fail "MariaDB is not installed: run 'apt-get install -y mariadb-server mariadb-client'"
  command -v mariadb >/dev/null || fail "the mariadb client is not installed: run 'apt-get install -y mariadb-client'"
  # the server's socket directory lives in /run, which a reboot empties
  if [ "$(id -u)" = 0 ] && [ ! -d /run/mysqld ]; then install -d -o mysql -g mysql /run/mysqld; fi
  start-stop-daemon --start --oknodo --quiet --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 300); do mariadb -h 127.0.0.1 -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
  mariadb -h 127.0.0.1 -uroot -e 'select 1' >/dev/null 2>&1 || fail "MariaDB did not start on 127.0.0.1:3306 (root, no password)"
fi
mariadb -h 127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null

bash scripts/memcached.sh
bash scripts/nginx.sh
bash scripts/redis-cluster.sh >/dev/null
bash scripts/chromium.sh
