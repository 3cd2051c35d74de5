#!/usr/bin/env node
/**
 * The `ratelimiting` command: `ratelimiting serve --config FILE`, `ratelimiting check-config
 * FILE`, `--help`, `--version`. See docs/SERVICE.md.
 */

// The service's own libraries are optional peer dependencies, so a user of the engine alone
// installs nothing else; the command says what to install instead of a bare module error.
const SERVICE_PACKAGES = ['yaml', 'ajv', 'pino', 'prom-client']

async function main(): Promise<number> {
  let runCli: (argv: string[]) => Promise<number>
  try {
    ;({ runCli } = await import('./cli-main.js'))
  } catch (err) {
    const missing = /Cannot find package '([^']+)'/.exec(err instanceof Error ? err.message : '')?.[1]
    if (missing !== undefined && SERVICE_PACKAGES.includes(missing)) {
      process.stderr.write(
        `ratelimiting: the service needs the packages ${SERVICE_PACKAGES.join(', ')} (missing: ${missing}).\n` +
          `Install them next to ratelimiting: npm install ${SERVICE_PACKAGES.join(' ')}\n`,
      )
      return 4
    }
    throw err
  }
  return runCli(process.argv.slice(2))
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`ratelimiting: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`)
    process.exit(1)
  },
)
