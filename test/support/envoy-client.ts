/**
 * A client of Envoy's rate limit service built only from Envoy's .proto files (proto/, loaded
 * with @grpc/proto-loader): no code of the service is involved, as for Envoy itself.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the client is made from the .proto files at run time: its messages have no static types */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import { loadSync } from '@grpc/proto-loader'

/** A message as proto-loader decodes it (keepCase, enums as names, 64-bit integers as numbers). */
export type Message = Record<string, any>

const protoDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../proto')
const definition = loadSync(['envoy/service/ratelimit/v3/rls.proto'], {
  includeDirs: [protoDir],
  keepCase: true,
  enums: String,
  longs: Number,
  defaults: false,
})
const rls = (grpc.loadPackageDefinition(definition) as any).envoy.service.ratelimit.v3

/** A ShouldRateLimit client of the listener on 127.0.0.1:`port` (in clear unless `credentials` say TLS). */
export interface RlsClient {
  call(request: Message): Promise<Message>
  close(): void
}

export function rlsClient(port: number, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure()): RlsClient {
  const client = new rls.RateLimitService(`127.0.0.1:${port}`, credentials)
  return {
    call: (request) =>
      new Promise((resolve, reject) =>
        client.ShouldRateLimit(request, (err: Error | null, r: Message) => (err ? reject(err) : resolve(r))),
      ),
    close: () => client.close(),
  }
}
