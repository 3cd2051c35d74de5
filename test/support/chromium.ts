/**
 * Debian's headless Chromium (scripts/chromium.sh installs it) driven by playwright-core, as the
 * tests of the pages the project serves use it: a fresh profile each launch, and the flags that
 * keep it off the network it cannot reach here.
 */
import { existsSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { type BrowserContext, chromium } from 'playwright-core'

export const CHROMIUM = '/usr/bin/chromium'

/** A test's `skip`: false when Chromium is installed, else the reason. */
export const chromiumMissing: string | false = existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing: run scripts/chromium.sh`

/** Launches Chromium with a fresh profile (playwright passes it as --user-data-dir). */
export function launchChromium(options: { viewport: { width: number; height: number }; offline?: boolean }): Promise<BrowserContext> {
  return chromium.launchPersistentContext(mkdtempSync(path.join(tmpdir(), 'chromium-profile-')), {
    executablePath: CHROMIUM,
    ...options,
    headless: true,
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
}
