/**
 * The status page at `/` in real headless Chromium (Debian's chromium, installed by
 * scripts/chromium.sh): it loads with no console error and nothing from elsewhere, lists the
 * configured policies and rules, and its denied rate and top keys change after traffic; with
 * auth on, the page holds no token and no data, asks for an admin token, and shows the status
 * once given one. Screenshots are saved under .tmp/.
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import type { BrowserContext, Page } from 'playwright-core'
import { chromiumMissing, launchChromium } from '../support/chromium.js'
import { call, check, root, startTestService } from './server-helpers.js'

const ADMIN = 'admin-token-status-1'
const CLIENT = 'client-token-status-1'

const EDGE = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 2 }
`

interface PageState {
  ready: boolean
  polls: number
  rates?: Array<{ allowed: number; denied: number }>
}

/** Opens `url`, collecting console errors, failed requests and requests to anywhere but `origin`. */
async function open(context: BrowserContext, url: string): Promise<{ page: Page; problems: string[] }> {
  const page = await context.newPage()
  const problems: string[] = []
  const origin = new URL(url).origin
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`)
  })
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`))
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`))
  page.on('request', (r) => {
    if (!r.url().startsWith(origin)) problems.push(`request elsewhere: ${r.url()}`)
  })
  await page.goto(url)
  return { page, problems }
}

const polls = (page: Page) => page.evaluate(() => (globalThis as unknown as { statusPage: PageState }).statusPage.polls)

describe('the status page in headless Chromium', { skip: chromiumMissing, timeout: 60_000 }, () => {
  let context: BrowserContext
  before(async () => {
    context = await launchChromium({ viewport: { width: 1250, height: 1000 } })
  })
  after(async () => {
    await context?.close()
  })

  it('lists the policies and rules, and shows the denied rate and the top keys once traffic comes', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'rl-status-'))
    mkdirSync(path.join(dir, 'domains'))
    writeFileSync(path.join(dir, 'domains', 'edge.yaml'), EDGE)
    const t = await startTestService(
      `rate-limiter: { use-algo: fixed-window-algo, max-requests: 100, window-size: 60 }
store: { type: memory }
policies:
  login: { use-algo: sliding-window-algo, max-requests: 3, window-size: 60 }
  api: { use-algo: sliding-window-counter-algo, max-requests: 50, window-size: 10 }
envoy: { domains: ${path.join(dir, 'domains')} }
`,
    )
    try {
      const { page, problems } = await open(context, `${t.url}/`)
      await page.waitForFunction(() => (globalThis as unknown as { statusPage: PageState }).statusPage.ready)
      const policyCells = await page.locator('#policies tbody tr td:first-child').allTextContents()
      assert.deepEqual(policyCells.sort(), ['api', 'default', 'login'])
      assert.match(await page.locator('#policies').innerText(), /sliding-window-algo/)
      assert.match(await page.locator('#rules').innerText(), /edge\.remote_address/)
      assert.equal(await page.locator('#chart canvas').count(), 1, 'uPlot draws the rates')
      assert.doesNotMatch(await page.locator('#top').innerText(), /mallory/)

      // mallory is over login's limit of 3; a crowd stays under it
      for (let i = 0; i < 12; i++) await check(t.url, { userId: 'mallory', policy: 'login' })
      for (let i = 0; i < 6; i++) await check(t.url, { userId: `user-${i}`, policy: 'login' })
      for (let i = 0; i < 4; i++)
        await fetch(`${t.url}/json`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '192.0.2.7' }] }] }),
        })
      const seen = await polls(page)
      await page.waitForFunction(
        (after) => {
          const s = (globalThis as unknown as { statusPage: PageState }).statusPage
          return s.polls > after && (s.rates ?? []).some((r) => r.denied > 0)
        },
        seen,
        { timeout: 10_000 },
      )
      const top = await page.locator('#top').innerText()
      assert.match(top, /policy login[\s\S]*mallory/)
      assert.match(top, /192\.0\.2\.7/)
      const loginRow = await page.locator('#policies tbody tr', { hasText: 'login' }).innerText()
      assert.match(loginRow, /\b9\b/, 'nine denials so far')
      mkdirSync(path.join(root, '.tmp'), { recursive: true })
      await page.screenshot({ path: path.join(root, '.tmp', 'status-page.png'), fullPage: true })
      assert.deepEqual(problems, [])
      await page.close()
    } finally {
      await t.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('with auth on: serves the page without a token or data, then shows the status given an admin token', async () => {
    const t = await startTestService(
      `store: { type: memory }\nauth: { tokens: [${CLIENT}], admin-tokens: [${ADMIN}] }\npolicies:\n  checkout-7: { max-requests: 1 }\n`,
    )
    try {
      const html = await (await fetch(`${t.url}/`)).text()
      assert.ok(!html.includes(ADMIN) && !html.includes(CLIENT), 'no token in the page')
      assert.ok(!html.includes('checkout-7'), 'no data in the page')
      assert.equal((await call(`${t.url}/v1/status`)).status, 401)
      assert.equal((await call(`${t.url}/v1/status`, { headers: { authorization: `Bearer ${CLIENT}` } })).status, 403)

      const { page, problems } = await open(context, `${t.url}/`)
      await page.locator('#login').waitFor({ state: 'visible' })
      assert.equal(await page.locator('#policies tbody tr').count(), 0)
      await page.fill('#token', CLIENT)
      await page.click('#login button')
      await page.locator('#loginError', { hasText: 'not an admin token' }).waitFor()
      await page.fill('#token', ADMIN)
      await page.click('#login button')
      await page.waitForFunction(() => (globalThis as unknown as { statusPage: PageState }).statusPage.ready)
      assert.equal(await page.locator('#login').isVisible(), false)
      const policyCells = await page.locator('#policies tbody tr td:first-child').allTextContents()
      assert.deepEqual(policyCells.sort(), ['checkout-7', 'default'])
      await page.screenshot({ path: path.join(root, '.tmp', 'status-page-auth.png'), fullPage: true })
      // the 401 and 403 of the fetches before the token are the page's own doing, not errors of it
      assert.deepEqual(
        problems.filter((p) => !/status of 40[13]/.test(p)),
        [],
      )
      await page.close()
    } finally {
      await t.close()
    }
  })
})
