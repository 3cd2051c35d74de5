import { createHash } from 'node:crypto'
import { watch } from 'node:fs'
import { readFile, stat } from 'node:fs/promises'
import path from 'node:path'

/** A config file being watched. */
export interface ConfigWatcher {
  close(): void
}

/** Options of {@link watchConfigFile}. */
export interface ConfigWatchOptions {
  /** Ms without a change before the file is read, and again before it is trusted. */
  readonly quietMs: number
  /** The file's text once it stopped changing; undefined when it cannot be read (twice alike). */
  readonly onStable: (text: string | undefined) => void
  /** Watching failed (the directory went away, too many watchers): reloads then need SIGHUP. */
  readonly onError: (err: unknown) => void
}

interface Snapshot {
  /** Size, mtime and SHA-256 of the content (or the read error's code). */
  readonly id: string
  readonly text: string | undefined
}

async function snapshot(file: string): Promise<Snapshot> {
  try {
    const [info, text] = await Promise.all([stat(file), readFile(file, 'utf8')])
    const digest = createHash('sha256').update(text).digest('hex')
    return { id: `${info.size}:${info.mtimeMs}:${digest}`, text }
  } catch (err) {
    return { id: `error:${(err as NodeJS.ErrnoException).code ?? String(err)}`, text: undefined }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref())
}

/**
 * Watches a config file and reports its text once it is stable: no change for `quietMs`, then
 * read, then the same size, mtime and content `quietMs` later with no change between. A file
 * written in several chunks (a slow writer, `: >` then an append) is never reported half
 * written unless its writer pauses for more than 2 × `quietMs`. The directory is watched, not
 * the file: editors and config managers replace files by rename.
 */
export function watchConfigFile(file: string, options: ConfigWatchOptions): ConfigWatcher {
  const { quietMs, onStable } = options
  const base = path.basename(file)
  let changes = 0
  let closed = false
  let timer: NodeJS.Timeout | undefined

  const schedule = () => {
    clearTimeout(timer)
    timer = setTimeout(() => void settle(), quietMs)
    timer.unref()
  }

  async function settle(): Promise<void> {
    const seen = changes
    const first = await snapshot(file)
    await sleep(quietMs)
    if (closed || changes !== seen) return
    const second = await snapshot(file)
    if (closed || changes !== seen) return
    // changed without an event reaching us (some file systems coalesce them): wait again
    if (second.id !== first.id) schedule()
    else onStable(second.text)
  }

  const watcher = watch(path.dirname(path.resolve(file)), { persistent: false }, (_event, filename) => {
    if (filename !== null && filename !== base) return
    changes++
    schedule()
  })
  watcher.on('error', options.onError)
  return {
    close() {
      closed = true
      clearTimeout(timer)
      watcher.close()
    },
  }
}
