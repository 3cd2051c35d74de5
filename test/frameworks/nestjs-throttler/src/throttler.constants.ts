// Stands in for @nestjs/throttler's src/throttler.constants.ts, which controller.e2e-spec.ts
// imports for THROTTLER_OPTIONS: the package exports the token only through getOptionsToken().
import { getOptionsToken } from '@nestjs/throttler-6.5.0'

export const THROTTLER_OPTIONS = getOptionsToken()
