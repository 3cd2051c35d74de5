import { StoreError } from './errors.js'

/**
 * Settles like `promise`, or rejects with a STORE_TIMEOUT {@link StoreError} after `ms`.
 * The timer is cleared as soon as the promise settles; it keeps the process alive meanwhile,
 * as the store call it bounds would.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, strategy: string, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new StoreError('STORE_TIMEOUT', strategy, `${what} timed out after ${ms} ms`))
    }, ms)
    promise.then(
      (value) => {
        clearTimeout(timer)
        resolve(value)
      },
      (err: unknown) => {
        clearTimeout(timer)
        reject(err)
      },
    )
  })
}
