// A node:test reporter that prints one JSON line per finished test: its full name (the names of
// its ancestors and its own, joined by " > "), its file and whether it passed. The framework
// suite runners read these lines; files run in their own processes, so names are tracked per file.
export default async function* reporter(source) {
  const stacks = new Map()
  for await (const event of source) {
    const { type, data } = event
    if (type !== 'test:start' && type !== 'test:pass' && type !== 'test:fail') continue
    const file = data.file ?? ''
    let stack = stacks.get(file)
    if (stack === undefined) stacks.set(file, (stack = []))
    if (type === 'test:start') {
      stack.length = data.nesting
      stack.push(data.name)
      continue
    }
    // a file's own pass/fail event (nesting 0, named after the file) is not a test, nor is a
    // describe() block, unless something failed in it outside its tests
    if (data.nesting === 0 && data.name === file) {
      // a file that failed as a whole (it did not load, or crashed between tests)
      if (type === 'test:fail') yield `${JSON.stringify({ file, name: '(file)', status: 'failed', error: errorLine(data) })}\n`
      continue
    }
    if (data.details?.type === 'suite' && (type === 'test:pass' || data.details.error?.failureType === 'subtestsFailed')) continue
    const name = [...stack.slice(0, data.nesting), data.name].join(' > ')
    const status = type === 'test:pass' ? (data.skip !== undefined || data.todo !== undefined ? 'skipped' : 'passed') : 'failed'
    const error = type === 'test:fail' ? errorLine(data) : undefined
    yield `${JSON.stringify({ file, name, status, error })}\n`
  }
}

function errorLine(data) {
  const error = data.details?.error?.cause ?? data.details?.error
  let line = String(error ?? '').split('\n')[0]
  // an assertion says what it got; the stack says where in the test file
  if (error !== null && typeof error === 'object' && 'actual' in error && 'expected' in error)
    line += ` (actual ${JSON.stringify(error.actual)}, expected ${JSON.stringify(error.expected)})`
  const at = String(error?.stack ?? '')
    .split('\n')
    .find((l) => data.file !== undefined && l.includes(data.file))
  const where = at === undefined ? undefined : /:(\d+):\d+\)?$/.exec(at)
  if (where) line += ` at line ${where[1]}`
  return line
}
