/**
 * Runtime overrides spread by their change log (docs/SERVICE.md, "Runtime overrides (admin)"),
 * on Redis and on PostgreSQL: with 20,000 overrides in the store, written as the code before the
 * log kept them (a PostgreSQL table of that code is migrated, its rows kept), two instances
 * sharing it, what one writes reaches the other within `overrides-refresh`, and the other reads
 * only the overrides that changed; concurrent writers on both instances end where the store is;
 * a reader behind the trimmed log, or before a gap in it, reads everything; a store that lost
 * writes and took others at the same versions is read again in full.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { CHANGE_LOG_SIZE, LOG_FIELD_PREFIX, overridesKey, VERSION_FIELD } from '../../src/server/overrides-store.js'
import { OVERRIDES_LOG_TABLE, OVERRIDES_TABLE, OVERRIDES_VERSION_TABLE } from '../../src/server/overrides-postgres.js'
import { createTestSchema, SHARED_POSTGRES_URL, type TestSchema } from '../support/postgres-server.js'
import {
  type Answer,
  call,
  deleteKeys,
  SHARED_REDIS_URL,
  startTestService,
  type TestService,
  uniquePrefix,
  until,
} from './server-helpers.js'

const SEEDED = 20_000
/** The default policy's limit, what a user without an override gets. */
const DEFAULT_LIMIT = 3

/** A store under test, reached directly (the truth the instances must converge to). */
interface Store {
  readonly name: string
  /** The `store:` section of the config. */
  readonly section: string
  /** Writes `n` overrides `seed-<i>` = 100 + i % 900 of the default policy, as the code before the change log kept them. */
  seed(n: number): Promise<void>
  version(): Promise<number>
  /** The override the store holds, or undefined. */
  stored(policy: string, userId: string): Promise<number | undefined>
  logEntries(): Promise<number>
  /** Deletes the log entry of `version`, as a trim or a writer without a log leaves a gap. */
  dropLogEntry(version: number): Promise<void>
  /** Copies everything the store holds of these overrides, for restore(). */
  save(): Promise<void>
  /** Puts back what save() copied: the store loses the writes made since. */
  restore(): Promise<void>
  close(): Promise<void>
}

function seededLimit(i: number): number {
  return 100 + (i % 900)
}

async function redisStore(): Promise<Store> {
  const redis = new Redis(SHARED_REDIS_URL)
  const prefix = uniquePrefix()
  const key = overridesKey(prefix)
  let saved: Buffer | null = null
  return {
    name: 'Redis',
    section: `  key-prefix: ${prefix}\nstore: { type: redis, url: "${SHARED_REDIS_URL}" }`,
    async seed(n) {
      for (let i = 0; i < n; i += 1000) {
        const fields: Array<string | number> = []
        for (let j = i; j < Math.min(n, i + 1000); j++) fields.push(`default:seed-${j}`, seededLimit(j))
        await redis.hset(key, ...fields)
      }
      await redis.hset(key, VERSION_FIELD, Date.now() * 1000)
    },
    async version() {
      return Number(await redis.hget(key, VERSION_FIELD))
    },
    async stored(policy, userId) {
      const value = await redis.hget(key, `${policy}:${userId}`)
      return value === null ? undefined : Number(value)
    },
    async logEntries() {
      let count = 0
      let cursor = '0'
      do {
        const [next, found] = await redis.hscan(key, cursor, 'MATCH', `${LOG_FIELD_PREFIX}*`, 'COUNT', 1000)
        cursor = next
        count += found.length / 2
      } while (cursor !== '0')
      return count
    },
    async dropLogEntry(version) {
      assert.equal(await redis.hdel(key, `${LOG_FIELD_PREFIX}${version}`), 1, `the log entry of version ${version}`)
    },
    async save() {
      saved = await redis.dumpBuffer(key)
    },
    async restore() {
      await redis.restore(key, 0, saved as Buffer, 'REPLACE')
    },
    async close() {
      await deleteKeys(redis, prefix)
      redis.disconnect()
    },
  }
}

/** The tables as the code before the change log created them (overrides-postgres.ts then). */
function tablesBeforeTheLog(schema: string): string {
  return `CREATE SCHEMA IF NOT EXISTS "${schema}";
CREATE TABLE IF NOT EXISTS "${schema}"."ratelimiting_overrides" (
  scope        text COLLATE "C" NOT NULL,
  policy       text COLLATE "C" NOT NULL,
  user_id      text COLLATE "C" NOT NULL,
  max_requests bigint NOT NULL CHECK (max_requests > 0),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT "ratelimiting_overrides_pkey" PRIMARY KEY (scope, policy, user_id)
);
CREATE TABLE IF NOT EXISTS "${schema}"."ratelimiting_overrides_version" (
  scope   text COLLATE "C" NOT NULL PRIMARY KEY,
  version bigint NOT NULL
);`
}

async function postgresStore(): Promise<Store & { readonly schema: TestSchema; readonly scope: string }> {
  const schema = await createTestSchema('rl_ovinc')
  const scope = uniquePrefix()
  const table = (name: string) => `"${schema.schema}"."${name}"`
  // the tables there are (the code before the change log makes no log table)
  const present = async () => {
    const found = await schema.pool.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1`, [schema.schema])
    const names = new Set(found.rows.map((r) => r.table_name as string))
    return [OVERRIDES_TABLE, OVERRIDES_VERSION_TABLE, OVERRIDES_LOG_TABLE].filter((name) => names.has(name))
  }
  return {
    name: 'PostgreSQL',
    schema,
    scope,
    section: `  key-prefix: ${scope}\nstore: { type: postgres, url: "${SHARED_POSTGRES_URL}", schema: ${schema.schema} }`,
    async seed(n) {
      await schema.pool.query(tablesBeforeTheLog(schema.schema))
      await schema.pool.query(
        `INSERT INTO ${table(OVERRIDES_TABLE)} (scope, policy, user_id, max_requests)
         SELECT $1, 'default', 'seed-' || i, 100 + i % 900 FROM generate_series(0, $2::int - 1) AS i`,
        [scope, n],
      )
      await schema.pool.query(`INSERT INTO ${table(OVERRIDES_VERSION_TABLE)} (scope, version) VALUES ($1, $2)`, [scope, Date.now() * 1000])
    },
    async version() {
      return Number(
        (await schema.pool.query(`SELECT version::text AS v FROM ${table(OVERRIDES_VERSION_TABLE)} WHERE scope = $1`, [scope])).rows[0]?.v,
      )
    },
    async stored(policy, userId) {
      const rows = await schema.pool.query(
        `SELECT max_requests::int AS max FROM ${table(OVERRIDES_TABLE)} WHERE scope = $1 AND policy = $2 AND user_id = $3`,
        [scope, policy, userId],
      )
      return rows.rows[0]?.max as number | undefined
    },
    async logEntries() {
      return Number(
        (await schema.pool.query(`SELECT count(*)::int AS n FROM ${table(OVERRIDES_LOG_TABLE)} WHERE scope = $1`, [scope])).rows[0]?.n,
      )
    },
    async dropLogEntry(version) {
      const deleted = await schema.pool.query(`DELETE FROM ${table(OVERRIDES_LOG_TABLE)} WHERE scope = $1 AND version = $2`, [
        scope,
        version,
      ])
      assert.equal(deleted.rowCount, 1, `the log row of version ${version}`)
    },
    async save() {
      for (const name of await present())
        await schema.pool.query(`CREATE TABLE ${table(`saved_${name}`)} AS SELECT * FROM ${table(name)} WHERE scope = $1`, [scope])
    },
    async restore() {
      const client = await schema.pool.connect()
      try {
        await client.query('BEGIN')
        for (const name of await present()) {
          await client.query(`DELETE FROM ${table(name)} WHERE scope = $1`, [scope])
          await client.query(`INSERT INTO ${table(name)} SELECT * FROM ${table(`saved_${name}`)}`)
        }
        await client.query('COMMIT')
      } finally {
        client.release()
      }
    },
    async close() {
      await schema.drop()
    },
  }
}

function config(store: Store, refresh: number): string {
  return [
    'rate-limiter:',
    '  use-algo: sliding-window-counter-algo',
    `  max-requests: ${DEFAULT_LIMIT}`,
    '  window-size: 60',
    `  overrides-refresh: ${refresh}`,
    store.section,
    'policies:',
    '  login: { max-requests: 2 }',
    '',
  ].join('\n')
}

function put(base: string, policy: string, userId: string, maxRequests: number): Promise<Answer> {
  return call(`${base}/v1/overrides/${policy}/${encodeURIComponent(userId)}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ maxRequests }),
  })
}

function remove(base: string, policy: string, userId: string): Promise<Answer> {
  return call(`${base}/v1/overrides/${policy}/${encodeURIComponent(userId)}`, { method: 'DELETE' })
}

/** The limit an instance applies to `userId` (a read that counts nothing). */
async function limitOf(base: string, userId: string, policy = 'default'): Promise<number> {
  const a = await call(`${base}/v1/users/${encodeURIComponent(userId)}?policy=${policy}`)
  assert.equal(a.status, 200)
  return a.body?.limit as number
}

/** What an instance's refreshes did so far, from its /metrics. */
interface Refreshes {
  unchanged: number
  changes: number
  full: number
  changedRead: number
  fullRead: number
}

async function refreshes(base: string): Promise<Refreshes> {
  const text = await (await fetch(`${base}/metrics`)).text()
  // NaN when /metrics lacks it: every assertion on it fails
  const value = (line: string) => {
    const found = text.split('\n').find((l) => l.startsWith(`${line} `))
    return found === undefined ? Number.NaN : Number(found.slice(line.length + 1))
  }
  return {
    unchanged: value('ratelimiting_overrides_refreshes_total{result="unchanged"}'),
    changes: value('ratelimiting_overrides_refreshes_total{result="changes"}'),
    full: value('ratelimiting_overrides_refreshes_total{result="full"}'),
    changedRead: value('ratelimiting_overrides_read_total{refresh="changes"}'),
    fullRead: value('ratelimiting_overrides_read_total{refresh="full"}'),
  }
}

/** Runs `jobs` with at most `width` at a time. */
async function inParallel(jobs: Array<() => Promise<void>>, width: number): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < jobs.length) await (jobs[next++] as () => Promise<void>)()
    }),
  )
}

const STORES: Array<[string, () => Promise<Store>]> = [
  ['Redis', redisStore],
  ['PostgreSQL', postgresStore],
]

for (const [storeName, open] of STORES)
  describe(`runtime overrides read by their change log on ${storeName}`, { timeout: 120_000 }, () => {
    let store: Store
    const services: TestService[] = []
    const start = async (refresh: number) => {
      const t = await startTestService(config(store, refresh))
      services.push(t)
      return t
    }
    before(async () => {
      store = await open()
      await store.seed(SEEDED)
    })
    after(async () => {
      await Promise.all(services.map((s) => s.close()))
      await store.close()
    })

    it(`${SEEDED} overrides: PUTs and DELETEs on one instance apply on the other within overrides-refresh, which reads only the changed overrides`, async () => {
      const a = await start(0.2)
      const b = await start(0.2)
      const first = await refreshes(b.url)
      assert.equal(first.full, 1, 'the first read is a full one')
      assert.equal(first.fullRead, SEEDED, 'every override written before the change log is read')
      assert.equal(await limitOf(b.url, 'seed-7'), seededLimit(7))
      assert.equal(await limitOf(a.url, `seed-${SEEDED - 1}`), seededLimit(SEEDED - 1))

      // five overrides, six writes: a new one, a replaced one, a removed one, a named policy's,
      // and one set then removed
      const writes: Array<() => Promise<Answer>> = [
        () => put(a.url, 'default', 'new-1', 5000),
        () => put(a.url, 'default', 'seed-1', 4000),
        () => remove(a.url, 'default', 'seed-2'),
        () => put(a.url, 'login', 'new-1', 9),
        () => put(a.url, 'default', 'new-2', 77),
        () => remove(a.url, 'default', 'new-2'),
      ]
      for (const write of writes) assert.ok([200, 204].includes((await write()).status))
      const seen = async () =>
        (await limitOf(b.url, 'new-1')) === 5000 &&
        (await limitOf(b.url, 'seed-1')) === 4000 &&
        (await limitOf(b.url, 'seed-2')) === DEFAULT_LIMIT &&
        (await limitOf(b.url, 'new-1', 'login')) === 9 &&
        (await limitOf(b.url, 'new-2')) === DEFAULT_LIMIT
      // overrides-refresh is 0.2 s: the slack is for a loaded machine
      await until(seen, 1500, 'the other instance to apply every change within about the refresh interval')

      // polls went on meanwhile; let one more pass
      await new Promise((r) => setTimeout(r, 500))
      const then = await refreshes(b.url)
      assert.equal(then.full, 1, 'no other full read')
      assert.equal(then.fullRead, SEEDED)
      assert.ok(then.changes >= 1 && then.unchanged >= 1, JSON.stringify(then))
      const read = then.changedRead - first.changedRead
      assert.ok(read >= 5 && read <= writes.length, `read the changed overrides only: ${read} of ${SEEDED + 2}`)
      assert.equal(await limitOf(b.url, 'seed-3'), seededLimit(3), 'the others stay')
      const listed = await call(`${b.url}/v1/overrides/default`)
      assert.equal((listed.body?.overrides as unknown[]).length, SEEDED, `${SEEDED} - seed-2 + new-1`)
    })

    it('writers on both instances at once: both end with what the store holds, reading changes only', async () => {
      const a = await start(0.1)
      const b = await start(0.1)
      const before = [await refreshes(a.url), await refreshes(b.url)]
      const users = Array.from({ length: 12 }, (_, i) => `c-${i}`)
      const jobs: Array<() => Promise<void>> = []
      for (let round = 0; round < 4; round++)
        for (const [n, user] of users.entries())
          for (const t of [a, b]) {
            const value = 1000 + round * 100 + n + (t === a ? 0 : 50)
            jobs.push(async () => {
              const answer = (round + n) % 5 === 4 ? await remove(t.url, 'default', user) : await put(t.url, 'default', user, value)
              assert.ok([200, 204, 404].includes(answer.status), `status ${answer.status}`)
            })
          }
      await inParallel(jobs, 16)
      const truth = new Map<string, number>()
      for (const user of users) truth.set(user, (await store.stored('default', user)) ?? DEFAULT_LIMIT)
      for (const t of [a, b])
        await until(
          async () => {
            for (const user of users) if ((await limitOf(t.url, user)) !== truth.get(user)) return false
            return true
          },
          2000,
          'both instances to hold what the store holds',
        )
      const now = [await refreshes(a.url), await refreshes(b.url)]
      for (const i of [0, 1]) assert.equal(now[i]?.full, before[i]?.full, 'no full read')
      assert.ok((now[1]?.changedRead ?? 0) - (before[1]?.changedRead ?? 0) <= jobs.length)
    })

    it(`a reader behind the trimmed log (more than ${CHANGE_LOG_SIZE} writes) or before a gap in it reads everything, then changes again`, async () => {
      const a = await start(0.2)
      // b polls once an hour: a GET of /v1/overrides reads the store when asked
      const b = await start(3600)
      const readNow = async (userId: string) => call(`${b.url}/v1/overrides/default/${userId}`)
      const first = await refreshes(b.url)
      let held = 0
      for (const policy of ['default', 'login'])
        held += ((await call(`${b.url}/v1/overrides/${policy}`)).body?.overrides as unknown[]).length

      const burst = Array.from({ length: CHANGE_LOG_SIZE + 1 }, (_, i) => async () => {
        assert.equal((await put(a.url, 'default', `t-${i}`, 200 + i)).status, 200)
      })
      await inParallel(burst, 16)
      assert.equal(await store.logEntries(), CHANGE_LOG_SIZE, 'the log keeps its last entries only')
      const one = await readNow(`t-${CHANGE_LOG_SIZE}`)
      assert.equal(one.body?.maxRequests, 200 + CHANGE_LOG_SIZE)
      const trimmed = await refreshes(b.url)
      assert.equal(trimmed.full, first.full + 1, 'a full read')
      assert.equal(trimmed.fullRead - first.fullRead, held + CHANGE_LOG_SIZE + 1, 'every override of every policy')
      assert.equal(await limitOf(b.url, 't-0'), 200)

      // a gap: the entry of one write is missing (a trim in between, a writer that logs nothing)
      assert.equal((await put(a.url, 'default', 'gap-1', 31)).status, 200)
      await store.dropLogEntry(await store.version())
      assert.equal((await put(a.url, 'default', 'gap-2', 32)).status, 200)
      assert.equal((await readNow('gap-2')).body?.maxRequests, 32)
      const gap = await refreshes(b.url)
      assert.equal(gap.full, trimmed.full + 1, 'a full read past the gap')
      assert.equal(await limitOf(b.url, 'gap-1'), 31)

      // then back to reading changes only
      assert.equal((await put(a.url, 'default', 'gap-1', 41)).status, 200)
      assert.equal((await remove(a.url, 'default', 'gap-2')).status, 204)
      assert.equal((await readNow('gap-1')).body?.maxRequests, 41)
      assert.equal(await limitOf(b.url, 'gap-2'), DEFAULT_LIMIT)
      const after = await refreshes(b.url)
      assert.equal(after.full, gap.full)
      assert.equal(after.changedRead - gap.changedRead, 2)
    })

    it('a store that lost writes and took others at the same versions is read again in full', async () => {
      const a = await start(0.1)
      const b = await start(0.1)
      assert.equal((await put(a.url, 'default', 'h-1', 11)).status, 200)
      await until(async () => (await limitOf(b.url, 'h-1')) === 11, 2000, 'h-1')
      await store.save()
      const version = await store.version()
      assert.equal((await put(a.url, 'default', 'h-2', 12)).status, 200)
      assert.equal((await put(a.url, 'default', 'h-3', 13)).status, 200)
      await until(async () => (await limitOf(b.url, 'h-3')) === 13 && (await limitOf(b.url, 'h-2')) === 12, 2000, 'h-2 and h-3')
      const held = await refreshes(b.url)
      // a failover to a replica that missed the last two writes, then two other writes
      await store.restore()
      assert.equal((await put(a.url, 'default', 'h-4', 14)).status, 200)
      assert.equal((await put(a.url, 'default', 'h-5', 15)).status, 200)
      assert.equal(await store.version(), version + 2, 'the versions b holds, another history')
      for (const t of [a, b])
        await until(
          async () =>
            (await limitOf(t.url, 'h-4')) === 14 &&
            (await limitOf(t.url, 'h-5')) === 15 &&
            (await limitOf(t.url, 'h-2')) === DEFAULT_LIMIT &&
            (await limitOf(t.url, 'h-3')) === DEFAULT_LIMIT &&
            (await limitOf(t.url, 'h-1')) === 11,
          2000,
          'what the store now holds',
        )
      assert.ok((await refreshes(b.url)).full > held.full, 'read in full')
    })

    if (storeName === 'PostgreSQL')
      it('the tables made before the change log are kept with every override, and the log table added', async () => {
        const pg = store as Store & { schema: TestSchema; scope: string }
        const t = await start(1)
        await call(`${t.url}/v1/overrides/default`)
        const counted = await pg.schema.pool.query(
          `SELECT count(*)::int AS n FROM "${pg.schema.schema}"."${OVERRIDES_TABLE}" WHERE scope = $1 AND user_id LIKE 'seed-%'`,
          [pg.scope],
        )
        assert.equal(counted.rows[0]?.n, SEEDED - 1, 'the seeded rows, but seed-2 removed by the first test')
        const columns = await pg.schema.pool.query(
          `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
          [pg.schema.schema, OVERRIDES_LOG_TABLE],
        )
        assert.deepEqual(
          columns.rows.map((r) => r.column_name),
          ['scope', 'version', 'stamp', 'policy', 'user_id'],
        )
      })
  })
