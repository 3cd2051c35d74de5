/**
 * Makes the chart image of docs/SIMULATE.md: runs `ratelimiting simulate` on a synthetic trace
 * with --html, opens the report in headless Chromium (scripts/chromium.sh installs it) and saves
 * a screenshot of its charts as docs/img/simulate-report.png.
 *
 *   node --import tsx bench/accuracy/screenshot.ts
 */
import { mkdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { chromium } from 'playwright-core'
import { runSimulate } from '../../src/simulate/cli.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const html = path.join(root, '.tmp', 'simulate-docs.html')
mkdirSync(path.dirname(html), { recursive: true })
mkdirSync(path.join(root, 'docs', 'img'), { recursive: true })
const args = ['--profile', 'poisson', '--keys', '300', '--duration', '300', '--limit', '100', '--window', '60']
const grid = ['--nodes', '1,4,16', '--sync-rate', '0.1,0.5,1,2,5', '--algorithms', 'counter']
const code = await runSimulate([...args, ...grid, '--html', html], {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  stderrIsTTY: false,
})
if (code !== 0) process.exit(code)
const context = await chromium.launchPersistentContext(path.join(root, '.tmp', 'chromium-profile-docs'), {
  executablePath: '/usr/bin/chromium',
  offline: true,
  viewport: { width: 1050, height: 1200 },
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
})
const page = await context.newPage()
await page.goto(pathToFileURL(html).href)
await page.waitForFunction(() => (globalThis as unknown as { reportReady?: boolean }).reportReady === true)
await page.screenshot({ path: path.join(root, 'docs', 'img', 'simulate-report.png'), clip: { x: 0, y: 0, width: 1050, height: 1200 } })
await context.close()
console.log(`docs/img/simulate-report.png from: ratelimiting simulate ${[...args, ...grid].join(' ')}`)
