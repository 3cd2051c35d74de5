// The `ratelimiting` bin as npm linked it from the tarball: serve the in-memory default, one check.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'

const child = spawn('node_modules/.bin/ratelimiting', ['serve', '--port', '0', '--log-level', 'info'], {
  stdio: ['ignore', 'pipe', 'inherit'],
})
let log = ''
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`no listening log line within 10 s: ${log}`)), 10_000)
  child.stdout.on('data', (chunk) => {
    log += chunk
    const m = /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(log)
    if (m !== null) {
      clearTimeout(timer)
      resolve(Number(m[1]))
    }
  })
  child.once('exit', (code) => reject(new Error(`ratelimiting serve exited with ${code}: ${log}`)))
})
try {
  const res = await fetch(`http://127.0.0.1:${port}/v1/check`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ userId: 'u1' }),
  })
  assert.equal(res.status, 200)
  assert.equal((await res.json()).remaining, 99)
} catch (err) {
  child.kill('SIGKILL') // a failed check must not leave the service holding this process open
  throw err
}
child.kill('SIGTERM')
const [code] = await once(child, 'exit')
assert.equal(code, 0, 'SIGTERM ends the service cleanly')
console.log('esm-js cli: ok')
