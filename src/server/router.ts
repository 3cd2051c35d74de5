import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Runtime } from './runtime.js'

// The service's routes as a table (src/server/http.ts holds it): each route is a method and a
// path, who may call it, and its handler, in the file its name says (src/server/routes/). The
// table answers which route a request's method and path name, and what the path allows when
// its method is not among them. Modelled on Hono's routers, reduced to what the service needs:
// exact paths and one trailing wildcard.

/** One request, as a route's handler gets it (Hono's `c`). */
export interface RouteRequest {
  readonly req: IncomingMessage
  readonly res: ServerResponse
  /** The runtime the request uses, read once as it arrived (a reload swaps it for later requests). */
  readonly runtime: Runtime
  /** The path, without the query. */
  readonly path: string
  /** What the route's trailing `*` matched, still percent-encoded; `''` on an exact route. */
  readonly rest: string
  /** What follows `?`, or `''`. */
  readonly query: string
}

/** Answers one request; it throws only on a bug (the dispatcher answers 500 then). */
export type RouteHandler = (c: RouteRequest) => void

/**
 * Who may call a route when the config has auth tokens: anyone (`open`: the probes and the
 * scrape), a client or admin token (`client`), an admin token only (`admin`). Without tokens
 * every request may call every route.
 */
export type Access = 'open' | 'client' | 'admin'

/** One row of the route table. */
export interface Route {
  /** The method it answers, or `*` for every method (the handler then answers 405 itself where it must). */
  readonly method: string
  /** An exact path, or a prefix ending in `*` that matches every path under it (`/v1/users/*`). */
  readonly path: string
  readonly access: Access
  /** On an `admin` route, what a client token is told in the 403. */
  readonly forbidden?: string
  /** A `GET` route that answers `HEAD` too, though `Allow` names only `GET` (the probes). */
  readonly head?: boolean
  readonly handler: RouteHandler
}

/** The routes of one path: by method, and what a 405 says. */
export interface PathRoutes {
  readonly byMethod: ReadonlyMap<string, Route>
  /** The `Allow` header of a 405: the methods, comma-separated (`HEAD` left out). */
  readonly allow: string
  /** The methods as a 405's message names them: `GET or DELETE`. */
  readonly use: string
  /** Where `rest` starts in a path these routes match: the prefix's length (an exact path's length). */
  readonly restAt: number
}

/** Where a method and path lead: the routes of the path, and the route of the method, if any. */
export class RouteTable {
  private readonly exact = new Map<string, PathRoutes>()
  private readonly prefixes: Array<{ readonly prefix: string; readonly routes: PathRoutes }> = []

  constructor(routes: readonly Route[]) {
    const grouped = new Map<string, Route[]>()
    for (const route of routes) {
      const group = grouped.get(route.path)
      if (group === undefined) grouped.set(route.path, [route])
      else group.push(route)
    }
    for (const [path, group] of grouped) {
      const byMethod = new Map<string, Route>()
      for (const route of group) {
        if (byMethod.has(route.method)) throw new Error(`route table: ${route.method} ${path} is there twice`)
        byMethod.set(route.method, route)
        if (route.head === true) byMethod.set('HEAD', route)
      }
      const methods = group.map((r) => r.method).filter((m) => m !== '*')
      const at = methods.length - 1
      const routes: PathRoutes = {
        byMethod,
        allow: methods.join(', '),
        use: at < 1 ? (methods[0] ?? '') : `${methods.slice(0, at).join(', ')} or ${methods[at]}`,
        restAt: path.endsWith('*') ? path.length - 1 : path.length,
      }
      if (path.endsWith('*')) this.prefixes.push({ prefix: path.slice(0, -1), routes })
      else this.exact.set(path, routes)
    }
  }

  /** The routes of `path` (an exact path first, then the first prefix that matches), or undefined. */
  find(path: string): PathRoutes | undefined {
    const routes = this.exact.get(path)
    if (routes !== undefined) return routes
    for (const p of this.prefixes) if (path.startsWith(p.prefix)) return p.routes
    return undefined
  }
}
