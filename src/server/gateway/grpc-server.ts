import { existsSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import type * as Grpc from '@grpc/grpc-js'
import type * as ProtoLoader from '@grpc/proto-loader'
import type * as GrpcHealth from 'grpc-health-check'
import type { Server as TlsServer } from 'node:tls'
import type { Logger } from 'pino'
import { StoreError } from '../../core/errors.js'
import type { GrpcConfig } from '../config-gateway.js'
import { StoreStartError } from '../stores.js'
import type { RateLimitUnit } from './domains.js'
import { type EnvoyDescriptor, type EnvoyRequest, EnvoyRequestError, type EnvoyResponse } from './envoy-decide.js'
import type { GatewayMetrics } from './gateway-metrics.js'
import { type GrpcConnectionLimits, listenGrpc } from './grpc-connections.js'
import { scanDescriptors } from './rls-scan.js'

// The gRPC listener: Envoy's envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit from
// Envoy's own .proto files (proto/, Apache-2.0) and grpc.health.v1.Health (grpc-health-check).

/** The service name Envoy calls, also a name of the health service. */
export const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService'

/** The directory holding Envoy's .proto files: `proto/` of the package, from src/ or dist/. */
export function protoDir(): string {
  const dir = fileURLToPath(new URL('../../../proto/', import.meta.url))
  if (!existsSync(`${dir}envoy/service/ratelimit/v3/rls.proto`)) throw new StoreStartError(`Envoy's .proto files are missing from ${dir}`)
  return dir
}

/** What the listener needs from the service. */
export interface GrpcListenerOptions {
  readonly config: GrpcConfig
  /** Decides one request with the runtime in use when it arrives. */
  readonly decide: (request: EnvoyRequest) => Promise<EnvoyResponse>
  readonly metrics: GatewayMetrics
  readonly logger: Logger
  /**
   * `grpc.max-connections`, `idle-timeout-ms` and `max-stream-resets` in force, read at each
   * connection, idle check and reset (a reload applies). @default the config's
   */
  readonly limits?: () => GrpcConnectionLimits
  /** `envoy.max-descriptors` in force, read at each request: more are refused before decoding. */
  readonly maxDescriptors: () => number
  /** gRPC over TLS (`grpc.tls`): the TLS server the accepted connections go through (see listenGrpc). */
  readonly tls?: TlsServer
  /** Override the config's host / port (tests, port 0). */
  readonly host?: string
  readonly port?: number
}

/** A running gRPC listener. */
export interface GrpcListener {
  readonly host: string
  readonly port: number
  /** Health says NOT_SERVING, then in-flight calls finish (up to `timeoutMs`) and the listener stops. */
  close(timeoutMs: number): Promise<void>
}

async function load(name: string): Promise<Record<string, unknown>> {
  try {
    return (await import(name)) as Record<string, unknown>
  } catch (err) {
    throw new StoreStartError(
      `the grpc section needs the "${name}" package: npm install @grpc/grpc-js @grpc/proto-loader grpc-health-check`,
      {
        cause: err,
      },
    )
  }
}

const UNITS: Readonly<Record<string, RateLimitUnit>> = {
  SECOND: 'second',
  MINUTE: 'minute',
  HOUR: 'hour',
  DAY: 'day',
  WEEK: 'week',
  MONTH: 'month',
  YEAR: 'year',
}

/** The request as proto-loader decodes it (keepCase, enums as strings, longs as numbers, no defaults). */
export interface WireRequest {
  domain?: string
  descriptors?: Array<{
    entries?: Array<{ key?: string; value?: string }>
    limit?: { requests_per_unit?: number; unit?: string } | null
    hits_addend?: { value?: number } | null
  }>
  hits_addend?: number
}

/** Turns a decoded rls v3 request into the decision's input; throws {@link EnvoyRequestError}. */
export function fromWire(req: WireRequest): EnvoyRequest {
  const descriptors: EnvoyDescriptor[] = (req.descriptors ?? []).map((d, i) => {
    const entries = (d.entries ?? []).map((e) => ({ key: e.key ?? '', value: e.value ?? '' }))
    let limit: EnvoyDescriptor['limit']
    if (d.limit !== undefined && d.limit !== null) {
      // looked up as data: a unit such as "__proto__" or "toString" must not reach the prototype
      const name = d.limit.unit ?? ''
      const unit = Object.hasOwn(UNITS, name) ? UNITS[name] : undefined
      if (unit === undefined)
        throw new EnvoyRequestError(`descriptors[${i}].limit.unit must be a defined RateLimitUnit, got ${d.limit.unit ?? 'UNKNOWN'}`)
      limit = { requestsPerUnit: d.limit.requests_per_unit ?? 0, unit }
    }
    const hits = d.hits_addend?.value
    return {
      entries,
      ...(limit !== undefined ? { limit } : {}),
      ...(hits !== undefined && d.hits_addend !== null ? { hitsAddend: hitsOf(hits, `descriptors[${i}].hits_addend`) } : {}),
    }
  })
  return { domain: req.domain ?? '', descriptors, hitsAddend: hitsOf(req.hits_addend ?? 0, 'hits_addend') }
}

// Largest hits one descriptor may add: the service's largest cost per request.
const MAX_HITS = 1_000_000

function hitsOf(value: number, field: string): number {
  if (!Number.isSafeInteger(value) || value < 0 || value > MAX_HITS)
    throw new EnvoyRequestError(`${field} must be an integer from 0 to ${MAX_HITS}, got ${value}`)
  return value
}

/** The rls v3 response as proto-loader encodes it. */
export function toWire(r: EnvoyResponse): Record<string, unknown> {
  return {
    overall_code: r.overallCode,
    statuses: r.statuses.map((s) => ({
      code: s.code,
      ...(s.currentLimit !== undefined
        ? {
            current_limit: {
              name: s.currentLimit.name,
              requests_per_unit: s.currentLimit.requestsPerUnit,
              unit: s.currentLimit.unit.toUpperCase(),
            },
          }
        : {}),
      limit_remaining: s.limitRemaining,
      ...(s.durationUntilResetS !== undefined ? { duration_until_reset: { seconds: s.durationUntilResetS, nanos: 0 } } : {}),
    })),
    response_headers_to_add: r.headers.map((h) => ({ key: h.key, value: h.value })),
  }
}

// A request refused while decoding: what the handler answers instead of deciding.
const REFUSED = Symbol('refused')
type Decoded = WireRequest & { [REFUSED]?: string }

/** Starts the gRPC listener. Throws a StoreStartError when a gRPC package is missing or the port is taken. */
export async function startGrpcListener(options: GrpcListenerOptions): Promise<GrpcListener> {
  const grpc = (await load('@grpc/grpc-js')) as unknown as typeof Grpc
  const protoLoader = (await load('@grpc/proto-loader')) as unknown as typeof ProtoLoader
  const health = (await load('grpc-health-check')) as unknown as typeof GrpcHealth
  const definition = protoLoader.loadSync('envoy/service/ratelimit/v3/rls.proto', {
    includeDirs: [protoDir()],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: false,
    oneofs: true,
  })
  const rls = grpc.loadPackageDefinition(definition) as unknown as {
    envoy: { service: { ratelimit: { v3: { RateLimitService: { service: Grpc.ServiceDefinition } } } } }
  }
  const { metrics, logger, maxDescriptors } = options
  const server = new grpc.Server({ 'grpc.max_concurrent_streams': options.config.maxConcurrentStreams })
  const healthImpl = new health.HealthImplementation({ '': 'SERVING', [RLS_SERVICE]: 'SERVING' })
  healthImpl.addToServer(server)
  let inflight = 0
  let drained: (() => void) | undefined
  const method = 'ShouldRateLimit'
  const service = rls.envoy.service.ratelimit.v3.RateLimitService.service
  const shouldRateLimit = service.ShouldRateLimit as Grpc.MethodDefinition<WireRequest, unknown>
  const decode = shouldRateLimit.requestDeserialize
  server.addService(
    {
      ...service,
      ShouldRateLimit: {
        ...shouldRateLimit,
        // envoy.max-descriptors before decoding: a message of 140,000 descriptors is refused for
        // the cost of walking its fields, not of decoding them all (validate() says the same after)
        requestDeserialize(bytes: Buffer): Decoded {
          const max = maxDescriptors()
          const scan = scanDescriptors(bytes)
          if (scan.count <= max) return decode(bytes)
          // malformed past the maximum: refused as any undecodable message is (INTERNAL), undecoded
          if (!scan.complete) throw new Error('malformed RateLimitRequest')
          return { [REFUSED]: `at most ${max} descriptors per request (envoy.max-descriptors), got ${scan.count}` }
        },
      },
    },
    {
      ShouldRateLimit(call: Grpc.ServerUnaryCall<Decoded, unknown>, callback: Grpc.sendUnaryData<unknown>) {
        const started = performance.now()
        inflight++
        const finish = (code: Grpc.status, err: Grpc.ServiceError | null, value?: unknown) => {
          metrics.grpcCall(method, grpc.status[code] ?? String(code), (performance.now() - started) / 1000)
          callback(err, value)
          if (--inflight === 0) drained?.()
        }
        const invalid = (message: string) =>
          finish(grpc.status.INVALID_ARGUMENT, { name: 'Error', message, code: grpc.status.INVALID_ARGUMENT } as Grpc.ServiceError)
        const refused = call.request[REFUSED]
        if (refused !== undefined) {
          invalid(refused)
          return
        }
        let request: EnvoyRequest
        try {
          request = fromWire(call.request)
        } catch (err) {
          invalid((err as Error).message)
          return
        }
        options.decide(request).then(
          (r) => finish(grpc.status.OK, null, toWire(r)),
          (err: unknown) => {
            const code =
              err instanceof EnvoyRequestError
                ? grpc.status.INVALID_ARGUMENT
                : err instanceof StoreError
                  ? grpc.status.UNAVAILABLE
                  : grpc.status.INTERNAL
            if (code === grpc.status.INTERNAL) logger.error({ err }, 'ShouldRateLimit failed')
            const message = code === grpc.status.INTERNAL ? 'the decision failed; see the service log' : (err as Error).message
            finish(code, { name: 'Error', message, code } as Grpc.ServiceError)
          },
        )
      },
    },
  )
  const host = options.host ?? options.config.host
  const config = options.config
  const connections = await listenGrpc({
    host,
    port: options.port ?? config.port,
    limits: options.limits ?? (() => config),
    server,
    // with grpc.tls, grpc-js gets the decrypted socket: TLS ends in the service, which rotates it
    credentials: grpc.ServerCredentials.createInsecure(),
    ...(options.tls !== undefined ? { tls: options.tls } : {}),
    metrics,
    logger,
  })
  metrics.watchGrpcConnections(connections.open)
  return {
    host,
    port: connections.port,
    async close(timeoutMs: number) {
      healthImpl.setStatus('', 'NOT_SERVING')
      healthImpl.setStatus(RLS_SERVICE, 'NOT_SERVING')
      const stopped = new Promise<void>((resolve) => server.tryShutdown(() => resolve()))
      // no new connections; idle ones closed now, the others once their last call ends
      connections.drain()
      const timer = setTimeout(() => {
        server.forceShutdown()
        connections.destroyAll()
      }, timeoutMs)
      timer.unref()
      await Promise.all([stopped, connections.closed()])
      clearTimeout(timer)
      if (inflight > 0) await new Promise<void>((resolve) => (drained = resolve))
    },
  }
}
