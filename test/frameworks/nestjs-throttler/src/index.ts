// Stands in for @nestjs/throttler's src/index.ts, which the vendored tests import as '../src'
// (or '../../src'): the pinned package itself (@nestjs/throttler-6.5.0, an npm alias of
// @nestjs/throttler@6.5.0), with our storage as the default storage. A ThrottlerModule.forRoot()
// or forRootAsync() whose options name no `storage` gets `new RateLimitingThrottlerStorage()`
// (with RATELIMITING_SUITE_STRATEGY=memory, on a new MemoryStrategy in synchronous mode), made
// where the package makes its ThrottlerStorageService: in the storage provider's factory, once
// per application, so options a test overrides (overrideProvider) still decide. A test that
// passes its own storage keeps it. Nothing else changes: what a test asserts is the package's
// behaviour over our storage. RATELIMITING_SUITE_BASELINE=1 leaves the package's own
// ThrottlerStorageService in place (the run that checks the harness).
import type { DynamicModule, Provider } from '@nestjs/common'
import * as upstream from '@nestjs/throttler-6.5.0'
import { RateLimitingThrottlerStorage } from '../../../../src/adapters/nestjs.js'
import { MemoryStrategy } from '../../../../src/index.js'

export * from '@nestjs/throttler-6.5.0'

type Options = upstream.ThrottlerModuleOptions

function ourStorage(options: Options): upstream.ThrottlerStorage {
  if (!Array.isArray(options) && options.storage !== undefined) return options.storage
  // RATELIMITING_SUITE_STRATEGY=memory: the storage in synchronous mode on a strategy (a Promise per call)
  return new RateLimitingThrottlerStorage(process.env.RATELIMITING_SUITE_STRATEGY === 'memory' ? { strategy: new MemoryStrategy() } : {})
}

const ourStorageProvider: Provider = {
  provide: upstream.getStorageToken(),
  useFactory: ourStorage,
  inject: [upstream.getOptionsToken()],
}

function withOurStorage(module: DynamicModule): DynamicModule {
  if (process.env.RATELIMITING_SUITE_BASELINE === '1') return module
  const token = upstream.getStorageToken()
  const swap = <T>(p: T): T | Provider =>
    typeof p === 'object' && p !== null && (p as { provide?: unknown }).provide === token ? ourStorageProvider : p
  return { ...module, providers: module.providers?.map(swap), exports: module.exports?.map(swap) } as DynamicModule
}

export class ThrottlerModule extends upstream.ThrottlerModule {
  static override forRoot(options?: Options): DynamicModule {
    return withOurStorage(upstream.ThrottlerModule.forRoot(options))
  }

  static override forRootAsync(options: upstream.ThrottlerAsyncOptions): DynamicModule {
    return withOurStorage(upstream.ThrottlerModule.forRootAsync(options))
  }
}
