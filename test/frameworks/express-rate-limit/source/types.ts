// The vendored tests import their types from ../../source/types.js: the package's own.
export type * from 'express-rate-limit-8.6.2'
