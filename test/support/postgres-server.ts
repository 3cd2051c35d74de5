/**
 * PostgreSQL for the integration tests: a schema of its own in the shared server (dropped after),
 * and a private throw-away server (initdb + pg_ctl on a free loopback port) that a fault test
 * may kill and restart.
 */
import { execFile } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { chmod, chown, copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { freePort } from '../../src/testing/tcp-proxy.js'

const run = promisify(execFile)

/** The shared server's test database (override with RL_TEST_POSTGRES_URL). */
export const SHARED_POSTGRES_URL = process.env.RL_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

/** A schema created for one test file in the shared database. */
export interface TestSchema {
  readonly pool: pg.Pool
  readonly schema: string
  /** Drops the schema (only ours) and ends the pool. */
  drop(): Promise<void>
}

/** Creates a pool on the shared server and a fresh schema name (the strategy's migrate creates it). */
export async function createTestSchema(prefix = 'rl_test'): Promise<TestSchema> {
  const pool = new pg.Pool({ connectionString: SHARED_POSTGRES_URL, max: 8 })
  try {
    await pool.query('SELECT 1')
  } catch (err) {
    await pool.end()
    throw new Error(
      `PostgreSQL is not reachable at ${SHARED_POSTGRES_URL}: install it (apt-get install -y postgresql) and start it, or set RL_TEST_POSTGRES_URL`,
      { cause: err },
    )
  }
  const schema = `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 12)}`
  return {
    pool,
    schema,
    async drop() {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await pool.end()
    },
  }
}

function postgresBin(): string {
  const root = '/usr/lib/postgresql'
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((v) => existsSync(path.join(root, v, 'bin', 'pg_ctl')))
      .sort((a, b) => Number(b) - Number(a))
    if (versions[0] !== undefined) return path.join(root, versions[0], 'bin')
  }
  throw new Error('PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install -y postgresql')
}

/** A private PostgreSQL server on a free loopback port, for tests that kill it. */
export interface PrivatePostgres {
  readonly port: number
  readonly url: string
  /** Stops the server at once (`pg_ctl stop -m immediate`: no clean shutdown, like a crash). */
  kill(): Promise<void>
  /** Starts it again on the same port and data (committed rows survive, as after a crash). */
  start(): Promise<void>
  /** Stops it and deletes its data directory. */
  destroy(): Promise<void>
}

/**
 * initdb + pg_ctl start as the `postgres` user when run as root; about a second. With `tls`
 * (PEM files), only TLS connections with a client certificate of `ca` are accepted.
 */
export async function startPrivatePostgres(tls?: { cert: string; key: string; ca: string }): Promise<PrivatePostgres> {
  const bin = postgresBin()
  const dir = await mkdtemp(path.join(tmpdir(), 'rl-pg-'))
  const data = path.join(dir, 'data')
  const asRoot = process.getuid?.() === 0
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const { stdout: gid } = await run('id', ['-g', 'postgres'])
    await chown(dir, Number(stdout.trim()), Number(gid.trim()))
  }
  const exec = (cmd: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', path.join(bin, cmd), ...args]) : run(path.join(bin, cmd), args)
  await exec('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'])
  const port = await freePort()
  let sslOptions = ''
  if (tls !== undefined) {
    // the server reads them as postgres, and wants its key readable by its owner only
    for (const [name, file] of [
      ['server.crt', tls.cert],
      ['server.key', tls.key],
      ['ca.crt', tls.ca],
    ] as const) {
      await copyFile(file, path.join(data, name))
    }
    await chmod(path.join(data, 'server.key'), 0o600)
    if (asRoot) {
      const { stdout } = await run('id', ['-u', 'postgres'])
      const { stdout: gid } = await run('id', ['-g', 'postgres'])
      for (const name of ['server.crt', 'server.key', 'ca.crt'])
        await chown(path.join(data, name), Number(stdout.trim()), Number(gid.trim()))
    }
    await writeFile(path.join(data, 'pg_hba.conf'), 'local all all trust\nhostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n')
    if (asRoot) await run('chown', ['postgres:postgres', path.join(data, 'pg_hba.conf')])
    sslOptions = ' -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=ca.crt'
  }
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=50${sslOptions}`
  let running = false
  const server: PrivatePostgres = {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async kill() {
      if (!running) return
      running = false
      await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'])
    },
    async start() {
      if (running) return
      await exec('pg_ctl', ['-D', data, '-o', options, '-w', '-t', '30', '-l', path.join(dir, 'log'), 'start'])
      running = true
    },
    async destroy() {
      await server.kill().catch(() => undefined)
      await rm(dir, { recursive: true, force: true })
    },
  }
  await server.start()
  return server
}
