import type { Logger } from 'pino'

/** Subjects the shadow log keeps apart at once; further ones share one line a second (docs/GATEWAY.md). */
export const MAX_SHADOW_SUBJECTS = 1000

interface Last {
  atMs: number
  suppressed: number
}

/**
 * Logs shadow denials (a policy or rule in shadow mode that would have denied): at most one line
 * per second and subject, with the number left out since the last line, so a rollout that denies
 * a lot does not flood the log. The metrics count every one.
 *
 * A rule with `detailed_metric` or `value_to_metric` is a subject per descriptor value, which
 * requests choose: the log keeps at most {@link MAX_SHADOW_SUBJECTS} subjects, forgetting those
 * without a line in the last second; while all of them had one, a new subject is counted in one
 * line a second of its own (`otherSubjects: true`).
 */
export class ShadowLog {
  /** By subject, in the order of their last line. */
  private readonly last = new Map<string, Last>()
  private other: Last = { atMs: -Infinity, suppressed: 0 }

  constructor(private readonly logger: Logger) {}

  /** A request `subject` (such as `policy login` or `domain edge, rule per_ip`) would have denied. */
  denied(subject: string, fields: Record<string, unknown>): void {
    const now = Date.now()
    const last = this.last.get(subject)
    if (last !== undefined && now - last.atMs < 1000) {
      last.suppressed++
      return
    }
    if (last === undefined && this.last.size >= MAX_SHADOW_SUBJECTS) {
      this.forget(now)
      if (this.last.size >= MAX_SHADOW_SUBJECTS) {
        this.overflow(now)
        return
      }
    }
    this.last.delete(subject)
    this.last.set(subject, { atMs: now, suppressed: 0 })
    this.logger.info({ ...fields, shadowMode: true, suppressed: last?.suppressed ?? 0 }, 'shadow mode: would have denied')
  }

  // the oldest lines come first: stops at the first subject logged within the second
  private forget(now: number): void {
    for (const [subject, last] of this.last) {
      if (now - last.atMs < 1000) return
      this.last.delete(subject)
    }
  }

  private overflow(now: number): void {
    if (now - this.other.atMs < 1000) {
      this.other.suppressed++
      return
    }
    this.logger.info({ otherSubjects: true, shadowMode: true, suppressed: this.other.suppressed }, 'shadow mode: would have denied')
    this.other = { atMs: now, suppressed: 0 }
  }
}
