import { readFileSync } from 'node:fs'

/** The package version, read from package.json (two levels up from src/server and dist/server). */
export function packageVersion(): string {
  try {
    const text = readFileSync(new URL('../../package.json', import.meta.url), 'utf8')
    const version = (JSON.parse(text) as { version?: unknown }).version
    return typeof version === 'string' ? version : 'unknown'
  } catch {
    return 'unknown'
  }
}
