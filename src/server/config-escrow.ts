import { BUILT_IN_STORES } from '../strategies/capabilities.js'
import { type Raw, section } from './config-env.js'
import type { FailPolicy, PolicyConfig, StoreType } from './config.js'

// The checks of `escrow` and `on-store-error: share` (docs/SERVICE.md, "Escrow"): escrow is the
// counter algorithm's, needs a periodic sync and a store whose grants are atomic; share is what an
// escrow policy or rule does when no grant can be had, so nothing else may ask for it.

type Issues = Array<{ path: string[]; message: string }>

/** Whether the store type serves escrow namespaces: read from the stores' capabilities, never a list here. */
export function storeServesEscrow(storeType: StoreType): boolean {
  return BUILT_IN_STORES[storeType].supportsEscrow
}

/** The store types that serve escrow namespaces, for the messages. */
function escrowStores(): string {
  const names = (Object.keys(BUILT_IN_STORES) as StoreType[]).filter(storeServesEscrow)
  return names.length === 0 ? 'none yet' : names.join(', ')
}

/** Why `storeType` cannot serve escrow, as the end of a message. */
export function noEscrowStore(storeType: StoreType): string {
  return `store type ${storeType} does not serve escrow namespaces (its grants must be atomic); the store types that do: ${escrowStores()}`
}

/**
 * Checks each policy's `escrow` and `on-store-error`, reporting at the key that was written (the
 * policy's own, or `rate-limiter`'s it inherits), and turns `escrow` off on policies that only
 * inherit it and do not use the counter (as they inherit a sync rate they do not use).
 */
export function escrowIssues(raw: Raw, policies: Map<string, PolicyConfig>, storeType: StoreType, issues: Issues): void {
  const limiter = section(raw, 'rate-limiter')
  const named = section(raw, 'policies')
  for (const [name, p] of policies) {
    const isDefault = name === 'default'
    const own = isDefault ? limiter : section(named, name)
    const at = isDefault ? ['rate-limiter'] : ['policies', name]
    const escrowAt = own.escrow !== undefined ? [...at, 'escrow'] : ['rate-limiter', 'escrow']
    const counter = p.algo === 'sliding-window-counter-algo'
    let escrow = p.escrow
    if (escrow && !counter) {
      escrow = false
      // inherited by a policy of another algorithm: not used there, as an inherited sync-rate
      if (own.escrow !== undefined)
        issues.push({
          path: [...at, 'escrow'],
          message: `is for sliding-window-counter-algo only; ${p.algo} decides in the store on every request`,
        })
    }
    if (escrow && p.syncRate <= 0) {
      const defaulted = own['sync-rate'] === undefined && (isDefault || limiter['sync-rate'] === undefined)
      const what = p.syncRate === 0 ? 'every hit goes to the store' : 'local only'
      issues.push({
        path: own.escrow !== undefined ? [...at, 'escrow'] : own['sync-rate'] !== undefined ? [...at, 'sync-rate'] : escrowAt,
        message: `escrow needs a periodic sync (sync-rate > 0), got sync-rate ${p.syncRate} (${what}${defaulted ? `, the ${storeType} store's default` : ''})`,
      })
    }
    if (escrow && !storeServesEscrow(storeType)) issues.push({ path: escrowAt, message: `is not available: ${noEscrowStore(storeType)}` })
    if (p.onStoreError === 'share' && !escrow) {
      const inherited = own['on-store-error'] === undefined
      issues.push({
        path: inherited ? at : [...at, 'on-store-error'],
        message: inherited
          ? `inherits on-store-error: share from rate-limiter, which is for escrow policies only: give this policy escrow: true or its own on-store-error (error, allow or deny)`
          : 'share is for escrow policies only (escrow: true): each process then admits limit / n while no grant can be had; use error, allow or deny here',
      })
    }
    if (escrow !== p.escrow) policies.set(name, { ...p, escrow })
  }
}

/**
 * Checks the `envoy` section's `escrow` and `on-store-error` (the defaults of the rules and of
 * descriptors' own limits); the rules themselves are checked when the domain files load
 * (gateway/envoy-service.ts).
 */
export function envoyEscrowIssues(
  raw: Raw,
  envoy: { readonly algo: string; readonly syncRate: number; readonly escrow: boolean; readonly onStoreError: FailPolicy },
  storeType: StoreType,
  issues: Issues,
): void {
  const envoySection = section(raw, 'envoy')
  if (envoy.escrow && !storeServesEscrow(storeType))
    issues.push({ path: ['envoy', 'escrow'], message: `is not available: ${noEscrowStore(storeType)}` })
  if (envoy.escrow && envoy.algo === 'sliding-window-counter-algo' && envoy.syncRate <= 0)
    issues.push({
      path: ['envoy', envoySection['sync-rate'] === undefined ? 'escrow' : 'sync-rate'],
      message: `escrow needs a periodic sync (sync-rate > 0), got envoy.sync-rate ${envoy.syncRate}${envoySection['sync-rate'] === undefined ? ` (the ${storeType} store's default)` : ''}`,
    })
  // only a gateway that answers Envoy decides with it
  if (
    envoy.onStoreError === 'share' &&
    envoySection.domains !== undefined &&
    !(envoy.escrow && envoy.algo === 'sliding-window-counter-algo')
  ) {
    const inherited = envoySection['on-store-error'] === undefined
    issues.push({
      path: inherited ? ['envoy'] : ['envoy', 'on-store-error'],
      message: `${inherited ? 'inherits share from rate-limiter.on-store-error; ' : ''}share is for escrow only: it needs envoy.escrow: true and envoy.use-algo: sliding-window-counter-algo (descriptors' own limits use them), or ${inherited ? 'set envoy.on-store-error to' : 'use'} error, allow or deny`,
    })
  }
}
