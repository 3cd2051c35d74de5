/**
 * The HTML report of `ratelimiting simulate --html` in a real headless Chromium (Debian's
 * package, installed by scripts/chromium.sh): it loads from a file with the network off, with no
 * console error, its three uPlot charts hold the expected series (read from the chart objects the
 * page exposes), and a screenshot is saved under .tmp/.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { BrowserContext } from 'playwright-core'
import { chromiumMissing, launchChromium } from '../support/chromium.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const dir = mkdtempSync(path.join(tmpdir(), 'simulate-html-'))

function simulate(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', 'src/server/cli.ts', 'simulate', ...args], { cwd: root }, (err, _out, stderr) =>
      err === null ? resolve() : reject(new Error(`simulate failed: ${stderr}`)),
    )
  })
}

describe('the HTML report in headless Chromium', { skip: chromiumMissing }, () => {
  let context: BrowserContext
  before(async () => {
    context = await launchChromium({ viewport: { width: 1100, height: 1400 }, offline: true })
  })
  after(async () => {
    await context?.close()
  })

  it('loads offline without console errors and draws three charts with their series', async () => {
    const html = path.join(dir, 'report.html')
    await simulate([
      '--profile',
      'poisson',
      '--limit',
      '20',
      '--window',
      '10',
      '--keys',
      '30',
      '--duration',
      '60',
      '--nodes',
      '1,2,4',
      '--sync-rate',
      '0.5,2',
      '--html',
      html,
    ])
    assert.doesNotMatch(readFileSync(html, 'utf8'), /<script[^>]+src=|<link[^>]+href=/, 'nothing is loaded from elsewhere')
    const page = await context.newPage()
    const problems: string[] = []
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`)
    })
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`))
    page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`))
    await page.goto(pathToFileURL(html).href)
    await page.waitForFunction(() => (globalThis as unknown as { reportReady?: boolean }).reportReady === true)
    const charts = await page.evaluate(() => {
      const w = globalThis as unknown as { charts: Record<string, { series: { label: string }[]; data: unknown[][] }> }
      return Object.fromEntries(
        Object.entries(w.charts).map(([name, u]) => [name, { labels: u.series.map((s) => s.label), points: u.data[0]?.length ?? 0 }]),
      )
    })
    assert.deepEqual(charts.overAdmission?.labels, ['sync s', '1 node', '2 nodes', '4 nodes'])
    assert.equal(charts.overAdmission?.points, 2)
    assert.deepEqual(charts.falseDenials?.labels, ['sync s', '1 node', '2 nodes', '4 nodes'])
    assert.deepEqual(charts.hottest?.labels, ['s', 'exact', 'estimated', 'limit'])
    assert.ok((charts.hottest?.points ?? 0) > 10)
    assert.equal(await page.locator('canvas').count(), 3)
    mkdirSync(path.join(root, '.tmp'), { recursive: true })
    await page.screenshot({ path: path.join(root, '.tmp', 'simulate-report.png'), fullPage: true })
    assert.deepEqual(problems, [])
    await page.close()
  })
})
