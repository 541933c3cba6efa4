import "server-only";
import { createReadStream } from "node:fs";
import { type FileHandle, mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Where an upload waits between its last byte arriving and its transaction: request bodies are
 * received whole before any database connection is taken, so a slow client holds a socket, never
 * a connection. Entries stay in memory while the request's share (SPOOL_MEMORY_BYTES) lasts and
 * spill to a private temporary directory beyond it; dispose() removes it, whatever happened.
 */

/** Per request: what an upload may keep in memory before its files go to disk. */
export const SPOOL_MEMORY_BYTES = 4 * 1024 * 1024;

export class BodySpool {
  private dir: Promise<string> | null = null;
  private entries: SpoolEntry[] = [];
  private files = 0;
  memoryLeft: number;
  /** Every write of every entry, in order (one parser writes them one after another). */
  writes: Promise<void> = Promise.resolve();

  constructor(memoryBytes = SPOOL_MEMORY_BYTES) {
    this.memoryLeft = memoryBytes;
  }

  entry(): SpoolEntry {
    const entry = new SpoolEntry(this);
    this.entries.push(entry);
    return entry;
  }

  /** Every write so far has landed (memory or disk); rejects with the first failed write. */
  settled(): Promise<void> {
    return this.writes;
  }

  async newFile(): Promise<string> {
    this.dir ??= mkdtemp(join(tmpdir(), "flotilla-upload-"));
    return join(await this.dir, String(this.files++));
  }

  async dispose(): Promise<void> {
    await Promise.all(this.entries.map((e) => e.close()));
    if (this.dir) await rm(await this.dir, { recursive: true, force: true });
  }
}

export class SpoolEntry {
  size = 0;
  private memory: Buffer[] = [];
  private path: string | null = null;
  private handle: FileHandle | null = null;

  constructor(private readonly spool: BodySpool) {}

  /** Appends a chunk (copied: the caller's buffer may be reused); the spool's settled() says when it landed. */
  write(chunk: Uint8Array): void {
    const copy = Buffer.from(chunk);
    this.size += copy.byteLength;
    this.spool.writes = this.spool.writes.then(() => this.append(copy));
    this.spool.writes.catch(() => {}); // reported through settled()
  }

  private async append(chunk: Buffer): Promise<void> {
    if (!this.handle && this.spool.memoryLeft >= chunk.byteLength) {
      this.spool.memoryLeft -= chunk.byteLength;
      this.memory.push(chunk);
      return;
    }
    if (!this.handle) {
      this.path = await this.spool.newFile();
      this.handle = await open(this.path, "wx", 0o600);
      const held = Buffer.concat(this.memory);
      this.spool.memoryLeft += held.byteLength;
      this.memory = [];
      if (held.byteLength > 0) await this.handle.write(held);
    }
    await this.handle.write(chunk);
  }

  async close(): Promise<void> {
    await this.spool.writes.catch(() => {});
    const handle = this.handle;
    this.handle = null;
    await handle?.close();
  }

  /** The whole content (for what is bounded small enough to hold: a workspace file). */
  async bytes(): Promise<Buffer> {
    await this.close();
    if (this.path === null) return Buffer.concat(this.memory);
    const chunks: Buffer[] = [];
    for await (const chunk of this.chunks()) chunks.push(chunk);
    return Buffer.concat(chunks, this.size);
  }

  /** The content in order, a piece at a time (at most `pieceBytes` each). */
  async *chunks(pieceBytes = 1024 * 1024): AsyncGenerator<Buffer> {
    await this.close();
    if (this.path === null) {
      yield* this.memory;
      return;
    }
    yield* createReadStream(this.path, { highWaterMark: pieceBytes }) as AsyncIterable<Buffer>;
  }
}

/** The whole request body into one spool entry; past `maxBytes` (declared or sent) the error `tooLarge` at once. */
export async function receiveBody(
  req: Request,
  spool: BodySpool,
  limits: { maxBytes: number; tooLarge: () => Error },
): Promise<SpoolEntry> {
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > limits.maxBytes) throw limits.tooLarge();
  const entry = spool.entry();
  if (!req.body) return entry;
  const reader = req.body.getReader();
  let done = false;
  try {
    for (;;) {
      const result = await reader.read();
      if (result.done) {
        done = true;
        break;
      }
      if (entry.size + result.value.byteLength > limits.maxBytes) throw limits.tooLarge();
      entry.write(result.value);
      await spool.settled();
    }
  } finally {
    if (!done) await reader.cancel().catch(() => {});
  }
  return entry;
}
