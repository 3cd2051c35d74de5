import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls'
import type { Logger } from 'pino'
import type { Clock } from '../core/clock.js'
import { TokenAuth } from './auth.js'
import { type ConfigEnv, ConfigFileError, defaultConfig, type LogLevel, parseConfig, type ServiceConfig } from './config.js'
import type { InForce } from './config-document.js'
import { loadTlsMaterial, type TlsMaterial } from './config-tls.js'
import { type ConfigWatcher, watchConfigFile } from './config-watch.js'
import { applyServerLimits, CONNECTIONS_CHECKING_INTERVAL_MS, guardConnections } from './connections.js'
import { createEnvoyDecider, loadServiceDomains, watchDomains } from './gateway/envoy-service.js'
import { type GrpcListener, startGrpcListener } from './gateway/grpc-server.js'
import { createRequestHandler } from './http.js'
import { createLogger } from './logger.js'
import { ServiceMetrics } from './metrics.js'
import type { ReloadAttempt } from './routes/config.js'
import { Runtime } from './runtime.js'
import { ShadowLog } from './shadow-log.js'
import { attachTopKeys, TopKeys } from './top-keys.js'

/** Options of {@link startService}. */
export interface ServiceOptions {
  /** The YAML config file; watched for changes. Without it (and without `config`) the built-in default runs. */
  readonly configPath?: string
  /** An already validated config (then `configPath` is only used for reloads). */
  readonly config?: ServiceConfig
  /** Environment overrides (RATELIMITING_STORE_URL, ...). @default process.env */
  readonly env?: ConfigEnv
  /** The logger. @default a pino logger writing JSON lines to stdout */
  readonly logger?: Logger
  /** Overrides the config's `log-level`, across reloads too. */
  readonly logLevel?: LogLevel
  /** Override the config's `server.host` / `server.port` (port 0 picks a free port). */
  readonly host?: string
  readonly port?: number
  /** Override the config's `grpc.port` (0 picks a free port); ignored without a `grpc` section. */
  readonly grpcPort?: number
  /** Reload when the config file changes. @default true when `configPath` is given */
  readonly watch?: boolean
  /**
   * Ms without a change before the changed config file is read, and again before what was read
   * is trusted (the file must be the same then): a change applies about twice this after the
   * file's last write. @default 300
   */
  readonly watchDebounceMs?: number
  /** The algorithms' clock, epoch ms (tests move it). @default Date.now */
  readonly clock?: Clock
  /** Include Node's default process metrics in /metrics. @default true */
  readonly defaultMetrics?: boolean
}

/** A running service. */
export interface RunningService {
  /** `http://host:port`, or `https://host:port` with `server.tls` */
  readonly url: string
  readonly host: string
  readonly port: number
  /** An `https.Server` with `server.tls`. */
  readonly server: Server
  /** The gRPC listener's address, when the config has a `grpc` section. */
  readonly grpc: { readonly host: string; readonly port: number } | undefined
  readonly metrics: ServiceMetrics
  readonly logger: Logger
  /** The config new requests use. */
  config(): ServiceConfig
  /** The runtime new requests use (for tests and diagnostics). */
  runtime(): Runtime
  /**
   * Loads the config file again and applies it to new requests. Resolves true when applied,
   * false when the new config was invalid (it is logged; the running config stays).
   */
  reload(trigger?: string): Promise<boolean>
  /** The last reload attempt (what `GET /v1/config` shows); undefined before the first. */
  lastReload(): ReloadAttempt | undefined
  /**
   * Graceful stop: stops accepting connections, lets in-flight requests finish (up to
   * `server.shutdown-timeout-ms`), flushes unsynced counts and closes the store. Rejects when
   * the flush failed.
   */
  close(): Promise<void>
}

function hash(text: string): string {
  return createHash('sha256').update(text).digest('hex')
}

/**
 * Starts the rate-limit service: loads the config (or the built-in default), opens its store,
 * listens, and reloads on `reload()` and on changes of the config file.
 *
 * @example
 * const service = await startService({ configPath: 'ratelimiting.yaml' })
 * process.on('SIGTERM', () => service.close().then(() => process.exit(0)))
 */
export async function startService(options: ServiceOptions = {}): Promise<RunningService> {
  const env = options.env ?? (process.env as ConfigEnv)
  const configPath = options.configPath
  let appliedHash = ''
  let config: ServiceConfig
  if (options.config !== undefined) config = options.config
  else if (configPath !== undefined) {
    const text = await readConfigText(configPath)
    config = parseConfig(text, configPath, env)
    appliedHash = hash(text)
  } else config = defaultConfig(env)

  // before the store opens: a bad certificate or key file is an invalid config (exit 3)
  const httpTls = config.server.tls === undefined ? undefined : await loadTlsMaterial(config.server.tls, 'server.tls', config.source)
  const startGrpcTls = config.gateway.grpc?.tls
  const grpcTls = startGrpcTls === undefined ? undefined : await loadTlsMaterial(startGrpcTls, 'grpc.tls', config.source)
  // never listens: the gRPC listener hands it each accepted connection; h2 is what gRPC speaks
  const grpcTlsServer: TlsServer | undefined =
    grpcTls === undefined
      ? undefined
      : createTlsServer({
          ...grpcTls.context,
          ALPNProtocols: ['h2'],
          requestCert: grpcTls.requestCert,
          rejectUnauthorized: grpcTls.rejectUnauthorized,
        })

  const logger = options.logger ?? createLogger(options.logLevel ?? config.logLevel)
  if (options.logger !== undefined && options.logLevel !== undefined) logger.level = options.logLevel
  const levelOf = (c: ServiceConfig) => options.logLevel ?? c.logLevel

  let current: Runtime | undefined
  const metrics = new ServiceMetrics(() => current, {
    defaultMetrics: options.defaultMetrics ?? true,
  })
  // who is being limited (GET /v1/top): the decision paths find it through their metrics
  attachTopKeys(new TopKeys({ clock: options.clock ?? Date.now }), metrics, metrics.gateway)
  // background failures (reconnects, periodic syncs) repeat while a store is down: one log line
  // per operation and second, with the count of those left out
  const lastLogged = new Map<string, { atMs: number; suppressed: number }>()
  const hooks = {
    ...(options.clock !== undefined ? { clock: options.clock } : {}),
    onStoreError(operation: string, err: Error) {
      // while the first runtime starts, its store is the config's
      metrics.storeError(current?.store.type ?? config.store.type, operation)
      const now = Date.now()
      const last = lastLogged.get(operation)
      if (last !== undefined && now - last.atMs < 1000) {
        last.suppressed++
        return
      }
      lastLogged.set(operation, { atMs: now, suppressed: 0 })
      logger.warn(
        { err: { message: err.message, code: (err as { code?: string }).code }, operation, suppressed: last?.suppressed ?? 0 },
        'store error',
      )
    },
  }
  current = await Runtime.create(config, hooks, undefined, await loadServiceDomains(config))
  let closing = false
  const shadowLog = new ShadowLog(logger)
  const decideEnvoy = createEnvoyDecider(() => current as Runtime, metrics, shadowLog, options.clock ?? Date.now)
  const retiring = new Set<Promise<void>>()
  let lastReload: ReloadAttempt | undefined

  const handler = createRequestHandler({
    runtime: () => current as Runtime,
    closing: () => closing,
    metrics,
    logger,
    shadowLog,
    decideEnvoy,
    lastReload: () => lastReload,
    // where it listens (an option or a port 0 resolved) and logs (--log-level), over the file's values
    inForce: (): InForce => ({ host, port, logLevel: logger.level, ...(grpc !== undefined ? { grpcPort: grpc.port } : {}) }),
  })
  const server: Server =
    httpTls === undefined
      ? createServer({ connectionsCheckingInterval: CONNECTIONS_CHECKING_INTERVAL_MS }, handler)
      : createHttpsServer(
          {
            connectionsCheckingInterval: CONNECTIONS_CHECKING_INTERVAL_MS,
            ...httpTls.context,
            requestCert: httpTls.requestCert,
            rejectUnauthorized: httpTls.rejectUnauthorized,
          },
          handler,
        )
  applyServerLimits(server, config.server)
  const connections = guardConnections(
    server,
    () => (current as Runtime).config.server.maxConnections,
    () => metrics.connectionRefused(),
  )
  metrics.watchConnections(connections.open)
  const host = options.host ?? config.server.host
  const requestedPort = options.port ?? config.server.port
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(requestedPort, host, () => {
        server.off('error', reject)
        resolve()
      })
    })
  } catch (err) {
    await current.retire(undefined).catch(() => undefined)
    throw err
  }
  const port = (server.address() as AddressInfo).port
  let grpc: GrpcListener | undefined
  if (config.gateway.grpc !== undefined) {
    const startGrpc = config.gateway.grpc
    try {
      grpc = await startGrpcListener({
        config: startGrpc,
        decide: decideEnvoy,
        metrics: metrics.gateway,
        logger,
        // read at each connection and request, as server.max-connections: a reload applies them
        limits: () => (current as Runtime).config.gateway.grpc ?? startGrpc,
        maxDescriptors: () => (current as Runtime).config.gateway.envoy.maxDescriptors,
        ...(grpcTlsServer !== undefined ? { tls: grpcTlsServer } : {}),
        ...(options.grpcPort !== undefined ? { port: options.grpcPort } : {}),
      })
    } catch (err) {
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await current.retire(undefined).catch(() => undefined)
      throw err
    }
  }
  const url = `${httpTls === undefined ? 'http' : 'https'}://${host.includes(':') ? `[${host}]` : host}:${port}`
  logger.info(
    {
      url,
      config: config.source,
      store: config.store.type,
      policies: [...config.policies.values()].map((p) => ({
        name: p.name,
        algo: p.algo,
        limit: p.maxRequests,
        window: p.windowSize,
        ...(p.escrow ? { escrow: true } : {}),
      })),
      auth: current.auth.enabled,
      ...(httpTls !== undefined
        ? { tls: { serial: httpTls.serial, validTo: httpTls.validTo, clientAuth: config.server.tls?.clientAuth } }
        : {}),
      ...(grpc !== undefined ? { grpc: `${grpc.host}:${grpc.port}` } : {}),
      ...(grpcTls !== undefined
        ? { grpcTls: { serial: grpcTls.serial, validTo: grpcTls.validTo, clientAuth: startGrpcTls?.clientAuth } }
        : {}),
      ...(config.gateway.envoy.domains !== undefined
        ? { domains: config.gateway.envoy.domains, rules: [...current.envoy.domains.rules()].length }
        : {}),
      ...(config.gateway.shadowMode ? { shadowMode: true } : {}),
    },
    'ratelimiting service listening',
  )
  if (!current.auth.enabled && !['127.0.0.1', '::1', 'localhost'].includes(host))
    logger.warn({ host }, 'no auth tokens configured and listening beyond loopback: anyone who can reach it can reset counters')

  let reloading: Promise<boolean> = Promise.resolve(true)
  function noteReload(trigger: string, error?: string): void {
    const source = trigger.startsWith('SIG') ? 'signal' : trigger.endsWith('file change') ? 'watch' : 'api'
    lastReload = { at: new Date().toISOString(), source, trigger, ok: error === undefined, ...(error !== undefined ? { error } : {}) }
  }
  async function doReload(trigger: string, onlyIfChanged: boolean, stableText: string | undefined): Promise<boolean> {
    if (configPath === undefined) {
      logger.warn({ trigger }, 'reload asked, but the service runs on the built-in default config: nothing to reload')
      noteReload(trigger, 'the service runs on the built-in default config: nothing to reload')
      return false
    }
    if (closing) return false
    let next: ServiceConfig
    let text: string
    let domains: Awaited<ReturnType<typeof loadServiceDomains>>
    let nextHttpTls: TlsMaterial | undefined
    let nextGrpcTls: TlsMaterial | undefined
    const previous = current as Runtime
    try {
      text = stableText ?? (await readConfigText(configPath))
      if (onlyIfChanged && hash(text) === appliedHash) return true
      next = parseConfig(text, configPath, env)
      domains = await loadServiceDomains(next)
      // read again on every reload: a rotated certificate applies to new connections
      if (next.server.tls !== undefined && httpTls !== undefined)
        nextHttpTls = await loadTlsMaterial(next.server.tls, 'server.tls', next.source)
      const nextGrpc = next.gateway.grpc?.tls
      if (nextGrpc !== undefined && grpcTlsServer !== undefined) nextGrpcTls = await loadTlsMaterial(nextGrpc, 'grpc.tls', next.source)
      // a token list that goes away would open every /v1 route to anyone: never by accident
      if (previous.auth.enabled && !new TokenAuth(next.auth).enabled)
        throw new ConfigFileError(configPath, [
          {
            path: 'auth',
            message:
              'the new config has no tokens, which would turn auth off: anyone could then check and reset; to turn auth off, restart the service',
          },
        ])
    } catch (err) {
      metrics.reload('failure')
      const issues = err instanceof ConfigFileError ? err.message.split('\n') : [String(err)]
      logger.error({ trigger, issues }, 'config reload rejected; the running config stays')
      noteReload(trigger, issues.join('\n'))
      return false
    }
    let runtime: Runtime
    try {
      runtime = await Runtime.create(next, hooks, previous, domains)
    } catch (err) {
      metrics.reload('failure')
      logger.error({ trigger, err }, 'config reload failed while opening the store; the running config stays')
      noteReload(trigger, `opening the store failed: ${err instanceof Error ? err.message : String(err)}`)
      return false
    }
    if (closing) {
      await runtime.retire(undefined).catch(() => undefined)
      return false
    }
    if (next.server.host !== previous.config.server.host || next.server.port !== previous.config.server.port)
      logger.warn({ host, port }, 'server.host and server.port changes need a restart; still listening on the old address')
    // grpc.max-connections, idle-timeout-ms and max-stream-resets apply to the running listener
    if (
      (next.server.tls === undefined) !== (httpTls === undefined) ||
      next.server.tls?.clientAuth !== previous.config.server.tls?.clientAuth
    )
      logger.warn(
        { tls: httpTls !== undefined },
        'adding or removing server.tls and changing its client-auth need a restart; the certificate, key and ca files are read again',
      )
    if (grpcListenerKeys(next) !== grpcListenerKeys(previous.config))
      logger.warn(
        { grpc: grpc === undefined ? null : `${grpc.host}:${grpc.port}` },
        'grpc.host, grpc.port, grpc.max-concurrent-streams, adding or removing grpc.tls or changing its client-auth, and adding or removing the grpc section need a restart; the gRPC listener stays as it was',
      )
    if (next.gateway.envoy.domains !== previous.config.gateway.envoy.domains) watchTheDomains(next.gateway.envoy.domains)
    watchTheTlsFiles(next)
    current = runtime
    appliedHash = hash(text)
    logger.level = levelOf(next)
    applyServerLimits(server, next.server)
    // open connections keep the context they were made with; new ones get this one
    if (nextHttpTls !== undefined) {
      ;(server as HttpsServer).setSecureContext(nextHttpTls.context)
      logger.info({ trigger, serial: nextHttpTls.serial, validTo: nextHttpTls.validTo }, 'server.tls certificate loaded')
    }
    if (nextGrpcTls !== undefined) {
      grpcTlsServer?.setSecureContext(nextGrpcTls.context)
      logger.info({ trigger, serial: nextGrpcTls.serial, validTo: nextGrpcTls.validTo }, 'grpc.tls certificate loaded')
    }
    const retire = previous.retire(runtime).catch((err: unknown) => logger.error({ err }, 'flushing the previous config failed'))
    retiring.add(retire)
    void retire.finally(() => retiring.delete(retire))
    metrics.reload('success')
    noteReload(trigger)
    logger.info(
      {
        trigger,
        config: next.source,
        store: next.store.type,
        policies: [...next.policies.values()].map((p) => ({
          name: p.name,
          algo: p.algo,
          limit: p.maxRequests,
          window: p.windowSize,
          ...(p.escrow ? { escrow: true } : {}),
        })),
      },
      'config reloaded',
    )
    return true
  }
  const reload = (trigger = 'api', onlyIfChanged = false, stableText?: string): Promise<boolean> => {
    reloading = reloading.then(() => doReload(trigger, onlyIfChanged, stableText))
    return reloading
  }

  let stopDomainWatch: () => void = () => undefined
  function watchTheDomains(target: string | undefined): void {
    stopDomainWatch()
    stopDomainWatch = () => undefined
    if (target === undefined || configPath === undefined || options.watch === false) return
    stopDomainWatch = watchDomains(target, options.watchDebounceMs ?? 300, () => void reload('domain file change'), logger)
  }
  watchTheDomains(config.gateway.envoy.domains)

  // the certificate, key and ca files: a change reloads, so a renewed certificate applies to new
  // connections without a SIGHUP (a cert and key written apart may be refused once, as mismatched)
  let tlsWatchers: ConfigWatcher[] = []
  let tlsWatched = ''
  function watchTheTlsFiles(c: ServiceConfig): void {
    const files = [...new Set([c.server.tls, c.gateway.grpc?.tls].flatMap((t) => (t === undefined ? [] : [t.cert, t.key, t.ca])))].filter(
      (f): f is string => f !== undefined,
    )
    if (files.join('\n') === tlsWatched) return
    for (const w of tlsWatchers) w.close()
    tlsWatchers = []
    tlsWatched = files.join('\n')
    if (configPath === undefined || options.watch === false || (httpTls === undefined && grpcTls === undefined)) return
    for (const file of files)
      try {
        tlsWatchers.push(
          watchConfigFile(file, {
            quietMs: options.watchDebounceMs ?? 300,
            onStable: () => void reload('tls file change'),
            onError: (err) => logger.warn({ err, file }, 'watching a TLS file failed; reload with SIGHUP'),
          }),
        )
      } catch (err) {
        logger.warn({ err, file }, 'cannot watch a TLS file; reload with SIGHUP')
      }
  }
  watchTheTlsFiles(config)

  let watcher: ConfigWatcher | undefined
  if (configPath !== undefined && (options.watch ?? true)) {
    try {
      watcher = watchConfigFile(configPath, {
        quietMs: options.watchDebounceMs ?? 300,
        onStable: (text) => void reload('file change', true, text),
        onError: (err) => logger.warn({ err }, 'watching the config file failed; reload with SIGHUP'),
      })
    } catch (err) {
      logger.warn({ err }, 'cannot watch the config file; reload with SIGHUP')
    }
  }

  let closed: Promise<void> | undefined
  function close(): Promise<void> {
    closed ??= (async () => {
      closing = true
      watcher?.close()
      stopDomainWatch()
      for (const w of tlsWatchers) w.close()
      const shutdownTimeoutMs = (current as Runtime).config.server.shutdownTimeoutMs
      logger.info({ shutdownTimeoutMs }, 'shutting down: no new connections, finishing in-flight requests')
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()))
      server.closeIdleConnections()
      // keep-alive connections that go idle after their last answer are closed as they do
      const idle = setInterval(() => server.closeIdleConnections(), 50)
      const force = setTimeout(() => {
        logger.warn('shutdown timeout: closing the remaining connections')
        server.closeAllConnections()
      }, shutdownTimeoutMs)
      force.unref()
      await Promise.all([stopped, grpc?.close(shutdownTimeoutMs)])
      clearInterval(idle)
      clearTimeout(force)
      await reloading.catch(() => undefined)
      await Promise.all(retiring)
      try {
        await (current as Runtime).retire(undefined)
        logger.info('stopped; unsynced counts flushed')
      } catch (err) {
        logger.error({ err }, 'flushing unsynced counts failed')
        throw err
      }
    })()
    return closed
  }

  return {
    url,
    host,
    port,
    server,
    grpc: grpc === undefined ? undefined : { host: grpc.host, port: grpc.port },
    metrics,
    logger,
    config: () => (current as Runtime).config,
    runtime: () => current as Runtime,
    reload: (trigger = 'api') => reload(trigger),
    lastReload: () => lastReload,
    close,
  }
}

/** What of the grpc section the running listener keeps until a restart. */
function grpcListenerKeys(config: ServiceConfig): string {
  const g = config.gateway.grpc
  // grpc.tls's files are read again; adding or removing it, or changing its client-auth, is not
  return g === undefined ? '' : JSON.stringify([g.host, g.port, g.maxConcurrentStreams, g.tls === undefined, g.tls?.clientAuth])
}

async function readConfigText(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8')
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'file not found' : `cannot read: ${(err as Error).message}`
    throw new ConfigFileError(file, [{ path: '', message: reason }])
  }
}
