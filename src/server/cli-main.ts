import { parseArgs } from 'node:util'
import { type ConfigEnv, ConfigFileError, type LogLevel, loadConfigFile } from './config.js'
import { loadTlsMaterial } from './config-tls.js'
import { loadServiceDomains } from './gateway/envoy-service.js'
import { LOG_LEVELS } from './config-schema.js'
import { createLogger } from './logger.js'
import { startService } from './service.js'
import { checkStoreModules, StoreStartError } from './stores.js'
import { packageVersion } from './version.js'

/** Exit codes of the `ratelimiting` command. */
export const EXIT = {
  /** Served and stopped cleanly; a valid config; help or version. */
  OK: 0,
  /** A failure while running: the shutdown flush failed or timed out, an unexpected error. */
  FAILURE: 1,
  /** A bad command line. */
  USAGE: 2,
  /** The config file is missing or invalid. */
  CONFIG: 3,
  /** The service could not start: a store module or driver is missing, the port is taken, the store refused. */
  STARTUP: 4,
} as const

/** The `--help` text. */
export const USAGE = `Usage: ratelimiting <command> [options]

Rate limiting as a service over HTTP (POST /v1/check, GET|DELETE /v1/users/{userId},
/healthz, /readyz, /metrics).

Commands:
  serve [--config FILE]   run the service; without --config, the built-in default
                          (memory store, sliding-window-algo, 100 per 60 s, 127.0.0.1:8080)
  check-config FILE       validate a config file, its Envoy domain files (envoy.domains) and
                          that its store can be loaded, then exit
  simulate [FILE]         replay an access log through the limiters on a fake clock to choose
                          a sync rate (ratelimiting simulate --help; docs/SIMULATE.md)

Options:
  -c, --config FILE       the YAML config file (reloaded on SIGHUP and when it changes)
      --host HOST         listen on HOST instead of server.host
      --port PORT         listen on PORT instead of server.port (0: any free port)
      --log-level LEVEL   ${LOG_LEVELS.join('|')} (instead of log-level)
      --no-watch          do not reload when the file changes (SIGHUP still reloads)
  -h, --help              show this help
  -v, --version           show the version

Environment:
  RATELIMITING_STORE_URL     overrides store.url (store.servers for memcached, store.nodes
                             for Redis when comma-separated)
  RATELIMITING_AUTH_TOKENS   comma-separated bearer tokens (replaces auth.tokens)
  RATELIMITING_ADMIN_TOKENS  comma-separated admin tokens (replaces auth.admin-tokens)
  RATELIMITING_SHADOW_MODE   true or false, 1 or 0, yes or no, on or off (replaces
                             shadow-mode: decide and count, but allow)

Signals: SIGHUP reloads the config; SIGTERM and SIGINT stop gracefully (in-flight requests
finish, unsynced counts are flushed).

Exit codes: 0 ok, 1 failure while running, 2 bad command line, 3 invalid config,
4 could not start (store module or driver missing, port in use, PostgreSQL unreachable or
its table not created).
`

/** Where the CLI writes and which process it controls; replaced in tests. */
export interface CliIo {
  readonly stdout: (text: string) => void
  readonly stderr: (text: string) => void
  readonly env: ConfigEnv
  /** Installs signal handlers; returns a function removing them. */
  readonly onSignal: (signal: NodeJS.Signals, handler: () => void) => () => void
}

const processIo: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env as ConfigEnv,
  onSignal(signal, handler) {
    process.on(signal, handler)
    return () => process.off(signal, handler)
  },
}

function usageError(io: CliIo, message: string): number {
  io.stderr(`ratelimiting: ${message}\n\n${USAGE}`)
  return EXIT.USAGE
}

/**
 * Runs the `ratelimiting` command with `argv` (without node and the script) and resolves with
 * the exit code; `serve` resolves when the service has stopped.
 */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  if (argv[0] === 'simulate') {
    const { runSimulate } = await import('../simulate/cli.js')
    return runSimulate(argv.slice(1), {
      stdout: io.stdout,
      stderr: io.stderr,
      stderrIsTTY: io === processIo && process.stderr.isTTY === true,
    })
  }
  let parsed: ReturnType<typeof parse>
  try {
    parsed = parse(argv)
  } catch (err) {
    return usageError(io, (err as Error).message)
  }
  const { values, positionals } = parsed
  if (values.help === true) {
    io.stdout(USAGE)
    return EXIT.OK
  }
  if (values.version === true) {
    io.stdout(`${packageVersion()}\n`)
    return EXIT.OK
  }
  const logLevel = values['log-level']
  if (logLevel !== undefined && !(LOG_LEVELS as readonly string[]).includes(logLevel))
    return usageError(io, `--log-level must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(logLevel)}`)
  let port: number | undefined
  if (values.port !== undefined) {
    port = Number(values.port)
    if (!/^\d+$/.test(values.port) || port > 65_535)
      return usageError(io, `--port must be an integer from 0 to 65535, got ${JSON.stringify(values.port)}`)
  }
  const [command, ...rest] = positionals
  switch (command) {
    case undefined:
      return usageError(io, 'a command is required')
    case 'check-config': {
      const file = rest[0] ?? values.config
      if (file === undefined) return usageError(io, 'check-config needs a FILE')
      if (rest.length > 1) return usageError(io, `unexpected arguments: ${rest.slice(1).join(' ')}`)
      return checkConfig(file, io)
    }
    case 'serve':
      if (rest.length > 0) return usageError(io, `unexpected arguments: ${rest.join(' ')}; give the file with --config`)
      return serve(io, {
        configPath: values.config,
        logLevel: logLevel as LogLevel | undefined,
        host: values.host,
        port,
        watch: values['no-watch'] !== true,
      })
    default:
      return usageError(io, `unknown command ${JSON.stringify(command)}`)
  }
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    strict: true,
    options: {
      config: { type: 'string', short: 'c' },
      host: { type: 'string' },
      port: { type: 'string' },
      'log-level': { type: 'string' },
      'no-watch': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      version: { type: 'boolean', short: 'v' },
    },
  })
}

async function checkConfig(file: string, io: CliIo): Promise<number> {
  try {
    const config = await loadConfigFile(file, io.env)
    if (config.server.tls !== undefined) await loadTlsMaterial(config.server.tls, 'server.tls', config.source)
    if (config.gateway.grpc?.tls !== undefined) await loadTlsMaterial(config.gateway.grpc.tls, 'grpc.tls', config.source)
    const needsStrategy = [...config.policies.values()].some((p) => p.algo === 'sliding-window-counter-algo' && p.syncRate >= 0)
    await checkStoreModules(config.store, needsStrategy)
    const domains = await loadServiceDomains(config)
    const policies = [...config.policies.values()].map(
      (p) => `${p.name} (${p.algo}${p.escrow ? ' + escrow' : ''}, ${p.maxRequests} per ${p.windowSize} s)`,
    )
    const rules =
      config.gateway.envoy.domains === undefined ? '' : `; envoy rules: ${[...domains.rules()].length} in ${domains.files.length} file(s)`
    io.stdout(`${file}: ok; store ${config.store.type}; policies: ${policies.join(', ')}${rules}\n`)
    return EXIT.OK
  } catch (err) {
    if (err instanceof ConfigFileError) {
      io.stderr(`${err.message}\n`)
      return EXIT.CONFIG
    }
    if (err instanceof StoreStartError) {
      io.stderr(`${file}: ${err.message}\n`)
      return EXIT.STARTUP
    }
    throw err
  }
}

interface ServeArgs {
  readonly configPath: string | undefined
  readonly logLevel: LogLevel | undefined
  readonly host: string | undefined
  readonly port: number | undefined
  readonly watch: boolean
}

async function serve(io: CliIo, args: ServeArgs): Promise<number> {
  const bootLogger = createLogger(args.logLevel ?? 'info')
  let service: Awaited<ReturnType<typeof startService>>
  try {
    service = await startService({
      ...(args.configPath !== undefined ? { configPath: args.configPath } : {}),
      ...(args.logLevel !== undefined ? { logLevel: args.logLevel } : {}),
      ...(args.host !== undefined ? { host: args.host } : {}),
      ...(args.port !== undefined ? { port: args.port } : {}),
      watch: args.watch,
      env: io.env,
    })
  } catch (err) {
    if (err instanceof ConfigFileError) {
      bootLogger.fatal({ file: err.file, issues: err.message.split('\n') }, 'invalid config')
      return EXIT.CONFIG
    }
    bootLogger.fatal({ err }, 'the service could not start')
    return EXIT.STARTUP
  }
  let off: Array<() => void> = []
  const code = await new Promise<number>((resolve) => {
    let stopping = false
    const stop = (signal: string) => {
      if (stopping) {
        service.logger.warn({ signal }, 'second stop signal: exiting now')
        resolve(EXIT.FAILURE)
        return
      }
      stopping = true
      service.logger.info({ signal }, 'stop signal received')
      service.close().then(
        () => resolve(EXIT.OK),
        () => resolve(EXIT.FAILURE),
      )
    }
    off = [
      io.onSignal('SIGTERM', () => stop('SIGTERM')),
      io.onSignal('SIGINT', () => stop('SIGINT')),
      io.onSignal('SIGHUP', () => void service.reload('SIGHUP')),
    ]
  })
  for (const remove of off) remove()
  return code
}
