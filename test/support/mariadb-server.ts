/**
 * MariaDB (or MySQL) for the integration tests: a table of its own per run in the shared server
 * (dropped after), and a private throw-away `mariadbd` on a free loopback port that a fault test
 * may kill (SIGKILL: InnoDB keeps what it committed, as after a crash) and start again.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import mysql from 'mysql2/promise'
import { freePort } from '../../src/testing/tcp-proxy.js'

const run = promisify(execFile)

/** The shared server's test database (override with RL_TEST_MYSQL_URL). */
export const SHARED_MYSQL_URL = process.env.RL_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test'

/** A table name for one test run in the shared database. */
export interface TestTable {
  readonly table: string
  /** Drops the table (only ours) and any other table named `${table}_*` the test made. */
  drop(): Promise<void>
}

/** Checks the shared server answers, and picks a fresh table name (the strategy's migrate creates it). */
export async function createTestTable(prefix = 'rl_test'): Promise<TestTable> {
  let admin: mysql.Connection
  try {
    admin = await mysql.createConnection({ uri: SHARED_MYSQL_URL, connectTimeout: 5000 })
  } catch (err) {
    throw new Error(
      `MariaDB/MySQL is not reachable at ${SHARED_MYSQL_URL}: install it (apt-get install -y mariadb-server) and run 'bash scripts/services.sh', or set RL_TEST_MYSQL_URL`,
      { cause: err },
    )
  }
  await admin.end()
  const table = `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`
  return {
    table,
    async drop() {
      const conn = await mysql.createConnection(SHARED_MYSQL_URL)
      try {
        const [rows] = await conn.query(
          'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?',
          [`${table}%`],
        )
        for (const { name } of rows as Array<{ name: string }>) await conn.query(`DROP TABLE IF EXISTS \`${name}\``)
      } finally {
        await conn.end()
      }
    },
  }
}

function binary(name: string, dirs: readonly string[]): string {
  for (const dir of dirs) {
    const file = path.join(dir, name)
    if (existsSync(file)) return file
  }
  throw new Error(`${name} not found in ${dirs.join(', ')}: apt-get install -y mariadb-server`)
}

/** A private MariaDB server on a free loopback port, for tests that kill it. */
export interface PrivateMariadb {
  readonly port: number
  /** `mysql://root@127.0.0.1:<port>/test` */
  readonly url: string
  /** Kills the server with SIGKILL, as a crash would; committed InnoDB rows survive it. */
  kill(): Promise<void>
  /** Starts it again on the same port and data, and waits until it takes connections. */
  start(): Promise<void>
  /** Kills it and deletes its files. */
  destroy(): Promise<void>
}

const SEARCH = ['/usr/sbin', '/usr/bin', '/usr/local/bin', '/usr/local/sbin']

/**
 * mariadb-install-db into a temp dir, then mariadbd on a free loopback port without grant
 * tables (any user, no password), as the `mysql` user when run as root. About two seconds.
 */
export async function startPrivateMariadb(): Promise<PrivateMariadb> {
  const server = binary('mariadbd', SEARCH)
  const installDb = binary('mariadb-install-db', SEARCH)
  const dir = await mkdtemp(path.join(tmpdir(), 'rl-mariadb-'))
  const data = path.join(dir, 'data')
  const asRoot = process.getuid?.() === 0
  const user = asRoot ? ['--user=mysql'] : []
  if (asRoot) {
    // mariadbd refuses to run as root: the mysql user must own its directory
    const { stdout: uid } = await run('id', ['-u', 'mysql'])
    const { stdout: gid } = await run('id', ['-g', 'mysql'])
    await chown(dir, Number(uid.trim()), Number(gid.trim()))
  }
  await run(installDb, [
    '--no-defaults',
    `--datadir=${data}`,
    ...user,
    '--skip-test-db',
    '--skip-name-resolve',
    '--auth-root-authentication-method=normal',
  ])
  const port = await freePort()
  const args = [
    '--no-defaults',
    ...user,
    `--datadir=${data}`,
    `--port=${port}`,
    '--bind-address=127.0.0.1',
    `--socket=${path.join(dir, 'mysqld.sock')}`,
    `--pid-file=${path.join(dir, 'mysqld.pid')}`,
    `--log-error=${path.join(dir, 'error.log')}`,
    '--skip-grant-tables',
    '--skip-name-resolve',
    '--skip-log-bin',
    '--innodb-buffer-pool-size=32M',
    // commits reach the OS at once and the disk within a second: a killed process loses nothing
    '--innodb-flush-log-at-trx-commit=2',
    '--max-connections=100',
  ]
  let child: ChildProcess | undefined
  // never leave a server behind, even when the test process ends early
  const reap = () => child?.kill('SIGKILL')
  process.once('exit', reap)

  async function ready(): Promise<void> {
    const started = Date.now()
    for (;;) {
      if (child === undefined || child.exitCode !== null) {
        const log = await readFile(path.join(dir, 'error.log'), 'utf8').catch(() => '')
        throw new Error(`mariadbd exited at start:\n${log.split('\n').slice(-15).join('\n')}`)
      }
      try {
        const conn = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root', connectTimeout: 1000 })
        await conn.query('CREATE DATABASE IF NOT EXISTS test')
        await conn.end()
        return
      } catch (err) {
        if (Date.now() - started > 30_000)
          throw new Error(`mariadbd did not take connections on 127.0.0.1:${port} within 30 s`, { cause: err })
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
  }

  const db: PrivateMariadb = {
    port,
    url: `mysql://root@127.0.0.1:${port}/test`,
    async kill() {
      const running = child
      if (running === undefined) return
      child = undefined
      if (running.exitCode === null && running.signalCode === null) {
        running.kill('SIGKILL')
        await once(running, 'exit')
      }
    },
    async start() {
      if (child !== undefined) return
      child = spawn(server, args, { stdio: 'ignore' })
      await ready()
    },
    async destroy() {
      await db.kill()
      process.removeListener('exit', reap)
      await rm(dir, { recursive: true, force: true })
    },
  }
  await db.start()
  return db
}
