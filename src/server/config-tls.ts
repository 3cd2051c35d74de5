import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { dirname, isAbsolute, resolve } from 'node:path'
import type { SecureContextOptions } from 'node:tls'
import { ConfigFileError } from './config-issues.js'
import { type Raw, section } from './config-env.js'
import type { CLIENT_AUTH_MODES } from './config-schema.js'

// The `tls` part of a listener's section: PEM files, and whether clients must show a certificate.

/** A `client-auth` value. */
export type ClientAuth = (typeof CLIENT_AUTH_MODES)[number]

/** A listener's `tls` section, with its files resolved against the config file's directory. */
export interface TlsConfig {
  /** The certificate chain, PEM. */
  readonly cert: string
  /** The private key of `cert`, PEM (unencrypted). */
  readonly key: string
  /** The CA certificates client certificates are checked against, PEM. */
  readonly ca: string | undefined
  /** @default 'none' */
  readonly clientAuth: ClientAuth
}

/** Reads `owner.tls` of a schema-valid document, collecting the checks a schema cannot make. */
export function tlsOf(raw: Raw, owner: string, source: string, issues: Array<{ path: string[]; message: string }>): TlsConfig | undefined {
  const own = section(raw, owner)
  if (own.tls === undefined) return undefined
  const tls = section(own, 'tls')
  const base = source.startsWith('<') ? process.cwd() : dirname(resolve(source))
  const file = (value: unknown): string => (isAbsolute(value as string) ? (value as string) : resolve(base, value as string))
  const clientAuth = (tls['client-auth'] as ClientAuth | undefined) ?? 'none'
  if (clientAuth !== 'none' && tls.ca === undefined)
    issues.push({
      path: [owner, 'tls', 'ca'],
      message: `is required with client-auth: ${clientAuth} (client certificates are checked against it)`,
    })
  return {
    cert: file(tls.cert),
    key: file(tls.key),
    ca: tls.ca === undefined ? undefined : file(tls.ca),
    clientAuth,
  }
}

/** The `sslmode` values pg accepts in a postgres URL (libpq's, and pg's `no-verify`). */
const SSL_MODES = ['disable', 'prefer', 'require', 'verify-ca', 'verify-full', 'no-verify']

/** The `sslmode` of a postgres URL, or undefined without one (or when the URL does not parse). */
export function sslModeOf(url: string): string | undefined {
  try {
    return new URL(url).searchParams.get('sslmode') ?? undefined
  } catch {
    return undefined
  }
}

/**
 * Reads `store.tls` of a schema-valid document: the files resolved, cert and key together, a
 * rediss:// url for redis, an sslmode that is not `disable` for postgres (whose url's sslmode is
 * checked here too).
 */
export function storeTlsOf(
  store: Raw,
  storeType: string,
  source: string,
  issues: Array<{ path: string[]; message: string }>,
): { ca?: string; cert?: string; key?: string } | undefined {
  const sslMode = storeType === 'postgres' && typeof store.url === 'string' ? sslModeOf(store.url) : undefined
  if (sslMode !== undefined && !SSL_MODES.includes(sslMode))
    issues.push({ path: ['store', 'url'], message: `sslmode must be one of ${SSL_MODES.join(', ')}, got ${JSON.stringify(sslMode)}` })
  if (store.tls === undefined) return undefined
  if (sslMode === 'disable') issues.push({ path: ['store', 'tls'], message: 'is for a TLS connection, but the url says sslmode=disable' })
  const tls = section(store, 'tls')
  const base = source.startsWith('<') ? process.cwd() : dirname(resolve(source))
  if ((tls.cert === undefined) !== (tls.key === undefined))
    issues.push({
      path: ['store', 'tls', tls.cert === undefined ? 'cert' : 'key'],
      message: 'a client certificate needs both cert and key',
    })
  if (storeType === 'redis' && typeof store.url === 'string' && store.url.startsWith('redis://'))
    issues.push({ path: ['store', 'tls'], message: 'is for a TLS connection: write the url as rediss://' })
  const out: { ca?: string; cert?: string; key?: string } = {}
  for (const k of ['ca', 'cert', 'key'] as const) {
    const v = tls[k] as string | undefined
    if (v !== undefined) out[k] = isAbsolute(v) ? v : resolve(base, v)
  }
  return out
}

/**
 * Reads `store.tls`'s files for the driver's TLS options. A file that cannot be read is a
 * {@link ConfigFileError} naming it (exit 3 at start; on reload the running store stays).
 */
export async function readStoreTls(tls: {
  ca?: string
  cert?: string
  key?: string
}): Promise<{ ca?: Buffer; cert?: Buffer; key?: Buffer }> {
  const out: { ca?: Buffer; cert?: Buffer; key?: Buffer } = {}
  for (const k of ['ca', 'cert', 'key'] as const) {
    const file = tls[k]
    if (file === undefined) continue
    try {
      out[k] = await readFile(file)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      throw new ConfigFileError(file, [
        { path: `store.tls.${k}`, message: code === 'ENOENT' ? 'file not found' : `cannot read: ${(err as Error).message}` },
      ])
    }
  }
  return out
}

/** What a TLS listener is given: the secure context's options, read from the files. */
export interface TlsMaterial {
  readonly context: SecureContextOptions
  readonly requestCert: boolean
  readonly rejectUnauthorized: boolean
  /** The serving certificate's serial number (hex), for logs. */
  readonly serial: string
  /** When the serving certificate expires (its `validTo`). */
  readonly validTo: string
}

/**
 * Reads and checks a `tls` section's files: each must be readable PEM, the key must match the
 * certificate, and the certificate must be valid now. `at` is the section's key path (`server.tls`). Throws a {@link ConfigFileError} naming the
 * config key and the file, so a bad file is exit 3 at start and a refused reload later.
 */
export async function loadTlsMaterial(tls: TlsConfig, at: string, source: string, now = Date.now()): Promise<TlsMaterial> {
  const fail = (key: string, file: string, message: string): never => {
    throw new ConfigFileError(source, [{ path: `${at}.${key}`, message: `${file}: ${message}` }])
  }
  const read = async (key: string, file: string): Promise<Buffer> => {
    try {
      return await readFile(file)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      return fail(key, file, code === 'ENOENT' ? 'file not found' : `cannot read: ${(err as Error).message}`)
    }
  }
  const [cert, key, ca] = await Promise.all([
    read('cert', tls.cert),
    read('key', tls.key),
    tls.ca === undefined ? undefined : read('ca', tls.ca),
  ])
  let x509: X509Certificate
  try {
    x509 = new X509Certificate(cert)
  } catch (err) {
    return fail('cert', tls.cert, `not a PEM certificate: ${(err as Error).message}`)
  }
  let keyObject: KeyObject
  try {
    keyObject = createPrivateKey(key)
  } catch (err) {
    return fail('key', tls.key, `not a PEM private key (an encrypted key is not supported): ${(err as Error).message}`)
  }
  if (!x509.checkPrivateKey(keyObject)) fail('key', tls.key, `does not match the certificate ${tls.cert}`)
  if (Date.parse(x509.validTo) <= now) fail('cert', tls.cert, `the certificate expired on ${x509.validTo}`)
  if (Date.parse(x509.validFrom) > now) fail('cert', tls.cert, `the certificate is not valid before ${x509.validFrom}`)
  if (ca !== undefined)
    try {
      new X509Certificate(ca)
    } catch (err) {
      fail('ca', tls.ca as string, `not a PEM certificate: ${(err as Error).message}`)
    }
  return {
    context: { cert, key, ...(ca !== undefined ? { ca } : {}) },
    requestCert: tls.clientAuth !== 'none',
    rejectUnauthorized: tls.clientAuth === 'require',
    serial: x509.serialNumber,
    validTo: x509.validTo,
  }
}
