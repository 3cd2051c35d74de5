/**
 * Certificates for the TLS tests, made with `openssl` at set-up in a temp directory: a CA, server
 * certificates for 127.0.0.1 and localhost (a second one for rotation, an expired one), a client
 * certificate, and a client certificate of another CA.
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'

/** A certificate and its key: file paths and PEM. */
export interface CertFiles {
  readonly cert: string
  readonly key: string
  readonly certPem: Buffer
  readonly keyPem: Buffer
  /** Hex, upper-case, as `getPeerCertificate().serialNumber` has it. */
  readonly serial: string
}

export interface TestCerts {
  readonly dir: string
  /** The CA file and PEM. */
  readonly ca: string
  readonly caPem: Buffer
  readonly server: CertFiles
  /** Another server certificate of the same CA, for rotation. */
  readonly server2: CertFiles
  /** A server certificate that expired yesterday. */
  readonly expired: CertFiles
  readonly client: CertFiles
  /** A client certificate of another CA. */
  readonly wrongClient: CertFiles
  remove(): void
}

function openssl(dir: string, args: string[]): void {
  try {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: Buffer }
    if (e.code === 'ENOENT') throw new Error('openssl is not installed: apt-get install openssl', { cause: err })
    throw new Error(`openssl ${args.join(' ')}: ${e.stderr?.toString() ?? e.message}`, { cause: err })
  }
}

const SAN = 'subjectAltName=IP:127.0.0.1,DNS:localhost'

/** Makes the certificates (P-256 keys: fast to generate). */
export function makeTestCerts(): TestCerts {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-certs-'))
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes']
  const makeCa = (name: string) =>
    openssl(dir, ['req', '-x509', ...ec, '-keyout', `${name}.key`, '-out', `${name}.pem`, '-subj', `/CN=${name}`, '-days', '2'])
  makeCa('ca')
  makeCa('other-ca')
  const issue = (name: string, ca: string, opts: { days?: number; server?: boolean } = {}): CertFiles => {
    openssl(dir, ['req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`])
    const ext = path.join(dir, `${name}.ext`)
    writeFileSync(ext, opts.server === true ? `${SAN}\nextendedKeyUsage=serverAuth\n` : 'extendedKeyUsage=clientAuth\n')
    // -set_serial: a random one, so each certificate is told apart by its serial
    const serialHex = randomBytes(8).toString('hex').replace(/^./, '1')
    openssl(dir, [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${ca}.pem`,
      '-CAkey',
      `${ca}.key`,
      '-set_serial',
      `0x${serialHex}`,
      '-days',
      String(opts.days ?? 2),
      '-extfile',
      ext,
      '-out',
      `${name}.pem`,
    ])
    const cert = path.join(dir, `${name}.pem`)
    const key = path.join(dir, `${name}.key`)
    const serial = execFileSync('openssl', ['x509', '-in', cert, '-noout', '-serial'])
      .toString()
      .trim()
      .replace(/^serial=/, '')
    return { cert, key, certPem: readFileSync(cert), keyPem: readFileSync(key), serial }
  }
  const ca = path.join(dir, 'ca.pem')
  return {
    dir,
    ca,
    caPem: readFileSync(ca),
    server: issue('server', 'ca', { server: true }),
    server2: issue('server2', 'ca', { server: true }),
    expired: issue('expired', 'ca', { server: true, days: -1 }),
    client: issue('client', 'ca'),
    wrongClient: issue('wrong-client', 'other-ca'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}
