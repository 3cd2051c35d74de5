// The service, required from CommonJS: its counter algorithm on memcached loads the store module
// on demand, and must load the CommonJS one (an ES module copy would bring a second engine).
const assert = require('node:assert/strict')
const { parseConfig, runCli, startService } = require('ratelimiting/server')
const { version } = require('ratelimiting/package.json')

const memcached = process.env.RATELIMITING_MEMCACHED ?? '127.0.0.1:11211'
const prefix = process.env.RATELIMITING_KEY_PREFIX ?? `scratch:${process.pid}`
const strategyFile = 'node_modules/ratelimiting/dist/strategies/memcached/memcached-strategy.cjs'
const isLoaded = () => Object.keys(require.cache).some((file) => file.endsWith(strategyFile))

async function main() {
  // the CommonJS build finds package.json from its own files, as the ESM one does
  let out = ''
  const io = { stdout: (text) => (out += text), stderr: (text) => (out += text), env: {}, onSignal: () => () => undefined }
  assert.equal(await runCli(['--version'], io), 0)
  assert.equal(out.trim(), version)

  const config = parseConfig(
    [
      'server: { host: 127.0.0.1, port: 0 }',
      'rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 1, window-size: 3600 }',
      `store: { type: memcached, servers: ["${memcached}"] }`,
    ].join('\n'),
    'scratch',
  )
  assert.equal(isLoaded(), false, 'the store module loads on demand')
  const service = await startService({ config, logLevel: 'silent' })
  const check = () =>
    fetch(`${service.url}/v1/check`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ userId: `${prefix}:u1` }),
    })
  assert.deepEqual([(await check()).status, (await check()).status], [200, 429])
  await service.close()
  assert.equal(isLoaded(), true, 'the service loaded the CommonJS memcached store')
  console.log('cjs-js service: ok')
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
