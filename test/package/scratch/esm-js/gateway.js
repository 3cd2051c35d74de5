// The gateway from the tarball: `ratelimiting serve` with a grpc section answers Envoy's
// ShouldRateLimit, called by a client built from the .proto files the package ships (proto/).
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import { loadSync } from '@grpc/proto-loader'

const dir = mkdtempSync(path.join(tmpdir(), 'ratelimiting-gateway-'))
writeFileSync(
  path.join(dir, 'edge.yaml'),
  'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n',
)
writeFileSync(path.join(dir, 'rl.yaml'), 'store: { type: memory }\ngrpc: { port: 0 }\nenvoy: { domains: edge.yaml }\n')
const child = spawn('node_modules/.bin/ratelimiting', ['serve', '--config', path.join(dir, 'rl.yaml'), '--port', '0'], {
  stdio: ['ignore', 'pipe', 'inherit'],
})
let log = ''
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`no listening log line within 10 s: ${log}`)), 10_000)
  child.stdout.on('data', (chunk) => {
    log += chunk
    const m = /"grpc":"127\.0\.0\.1:(\d+)"/.exec(log)
    if (m !== null) {
      clearTimeout(timer)
      resolve(Number(m[1]))
    }
  })
  child.once('exit', (code) => reject(new Error(`ratelimiting serve exited with ${code}: ${log}`)))
})
const definition = loadSync('envoy/service/ratelimit/v3/rls.proto', {
  includeDirs: ['node_modules/ratelimiting/proto'],
  keepCase: true,
  enums: String,
})
const rls = grpc.loadPackageDefinition(definition).envoy.service.ratelimit.v3
const client = new rls.RateLimitService(`127.0.0.1:${port}`, grpc.credentials.createInsecure())
const call = (request) => new Promise((resolve, reject) => client.ShouldRateLimit(request, (err, r) => (err ? reject(err) : resolve(r))))
try {
  const request = { domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.1' }] }] }
  const codes = [(await call(request)).overall_code, (await call(request)).overall_code, (await call(request)).overall_code]
  assert.deepEqual(codes, ['OK', 'OK', 'OVER_LIMIT'])
} catch (err) {
  child.kill('SIGKILL')
  throw err
} finally {
  client.close()
  rmSync(dir, { recursive: true, force: true })
}
child.kill('SIGTERM')
const [code] = await once(child, 'exit')
assert.equal(code, 0, 'SIGTERM ends the service and its gRPC listener cleanly')
console.log('esm-js gateway: ok')
