import type { Logger } from 'pino'

/**
 * Logs shadow denials (a policy or rule in shadow mode that would have denied): at most one line
 * per second and subject, with the number left out since the last line, so a rollout that denies
 * a lot does not flood the log. The metrics count every one.
 */
export class ShadowLog {
  private readonly last = new Map<string, { atMs: number; suppressed: number }>()

  constructor(private readonly logger: Logger) {}

  /** A request `subject` (such as `policy login` or `domain edge, rule per_ip`) would have denied. */
  denied(subject: string, fields: Record<string, unknown>): void {
    const now = Date.now()
    const last = this.last.get(subject)
    if (last !== undefined && now - last.atMs < 1000) {
      last.suppressed++
      return
    }
    // the map holds one entry per subject the config names: bounded by the config
    this.last.set(subject, { atMs: now, suppressed: 0 })
    this.logger.info({ ...fields, shadowMode: true, suppressed: last?.suppressed ?? 0 }, 'shadow mode: would have denied')
  }
}
