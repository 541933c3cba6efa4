import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import busboy from "busboy";
import { and, asc, desc, eq, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { compatFileChunks, compatFiles } from "@/server/db/schema";
import { AppError, notFound } from "@/server/errors";
import { CompatParamError } from "./errors";

/**
 * Uploaded batch input files (OpenAI /v1/files), per user. An upload is streamed from the
 * multipart body into ~1 MiB chunk rows inside one transaction (a failed or refused upload
 * leaves nothing), so a 200 MB file never sits in memory; content is streamed back the same way.
 */

export type FileRow = typeof compatFiles.$inferSelect;

export const CHUNK_BYTES = 1024 * 1024;
const NEWLINE = 0x0a;

export async function getFile(db: DbOrTx, args: { userId: string; fileId: string }): Promise<FileRow> {
  const [row] = await db
    .select()
    .from(compatFiles)
    .where(and(eq(compatFiles.id, args.fileId), eq(compatFiles.userId, args.userId)));
  if (!row) throw notFound("file");
  return row;
}

/**
 * Stores the `file` part of a multipart upload with its `purpose` field (which the SDKs send
 * after the file, so it is checked once the body has been read). Refuses a file over
 * compat.max_file_bytes or with more than compat.max_requests_per_file lines.
 */
export async function uploadFile(
  db: Db,
  args: { userId: string; contentType: string | null; body: ReadableStream<Uint8Array> | null; config: FlotillaConfig },
): Promise<FileRow> {
  const { max_file_bytes: maxBytes, max_requests_per_file: maxLines } = args.config.compat;
  if (!args.contentType?.toLowerCase().startsWith("multipart/form-data") || !args.body)
    throw new AppError("unsupported_media_type", "send multipart/form-data with a `file` part and purpose=batch");
  const contentType = args.contentType;
  const body = args.body;

  return db.transaction(async (tx) => {
    const fields: Record<string, string> = {};
    let stored: Promise<FileRow> | undefined;
    let part: Readable | undefined;
    const source = Readable.fromWeb(body as NodeReadableStream<Uint8Array>);
    let parser: busboy.Busboy;
    try {
      parser = busboy({
        headers: { "content-type": contentType },
        // The name as the client sent it: busboy's default keeps only what follows the last / or \.
        preservePath: true,
        limits: { files: 1, fields: 20, fieldSize: 4096 },
      });
    } catch {
      throw new AppError("validation_failed", "file: the multipart body is malformed");
    }
    const parsed = new Promise<void>((resolve, reject) => {
      parser.on("close", resolve);
      parser.on("error", reject);
      source.on("error", reject);
      parser.on("field", (name, value) => {
        fields[name] = value;
      });
      parser.on("file", (name, stream, info) => {
        if (name !== "file" || stored) {
          stream.resume();
          return;
        }
        part = stream;
        stored = storeFile(tx, { userId: args.userId, filename: info.filename || "upload.jsonl", stream, maxBytes, maxLines });
        // A refused file stops the upload: nothing more of it is read.
        stored.catch((err) => {
          source.unpipe(parser);
          source.destroy();
          reject(err);
        });
      });
    });
    source.pipe(parser);
    try {
      await parsed;
    } catch (err) {
      // A client that went away mid-file: end the part too, so the store stops waiting for bytes.
      part?.destroy();
      await stored?.catch(() => {});
      if (err instanceof AppError) throw err;
      throw new AppError("validation_failed", "file: the multipart body is malformed or incomplete");
    }
    if (!stored) throw new CompatParamError("file", "file: a `file` part is required");
    const row = await stored;
    if (fields.purpose !== "batch")
      throw new CompatParamError("purpose", `purpose: only "batch" is supported, got ${JSON.stringify(fields.purpose ?? null)}`);
    return row;
  });
}

async function storeFile(
  tx: DbOrTx,
  args: { userId: string; filename: string; stream: Readable; maxBytes: number; maxLines: number },
): Promise<FileRow> {
  const [file] = await tx
    .insert(compatFiles)
    .values({ userId: args.userId, filename: args.filename.slice(0, 255), purpose: "batch", bytes: 0, lines: 0 })
    .returning();
  let bytes = 0;
  let newlines = 0;
  let last = NEWLINE;
  let seq = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pendingBytes === 0) return;
    const data = Buffer.concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    await tx.insert(compatFileChunks).values({ fileId: file!.id, seq: seq++, data });
  };
  // Async iteration pauses the part while a chunk is written: backpressure down to the socket.
  for await (const chunk of args.stream as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    if (bytes > args.maxBytes)
      throw new AppError("payload_too_large", `file: larger than compat.max_file_bytes (${args.maxBytes} bytes)`);
    for (let i = chunk.indexOf(NEWLINE); i >= 0; i = chunk.indexOf(NEWLINE, i + 1)) newlines++;
    last = chunk[chunk.length - 1] ?? last;
    if (newlines > args.maxLines)
      throw new CompatParamError("file", `file: more than compat.max_requests_per_file (${args.maxLines}) lines`);
    pending.push(chunk);
    pendingBytes += chunk.length;
    if (pendingBytes >= CHUNK_BYTES) await flush();
  }
  await flush();
  const lines = newlines + (bytes > 0 && last !== NEWLINE ? 1 : 0);
  if (lines > args.maxLines)
    throw new CompatParamError("file", `file: more than compat.max_requests_per_file (${args.maxLines}) lines`);
  const [row] = await tx.update(compatFiles).set({ bytes, lines }).where(eq(compatFiles.id, file!.id)).returning();
  return row!;
}

/** The file's bytes in order, one chunk row read at a time. */
export async function* fileChunks(db: DbOrTx, fileId: string): AsyncGenerator<Buffer> {
  for (let seq = 0; ; seq++) {
    const [row] = await db
      .select({ data: compatFileChunks.data })
      .from(compatFileChunks)
      .where(and(eq(compatFileChunks.fileId, fileId), eq(compatFileChunks.seq, seq)));
    if (!row) return;
    yield row.data;
  }
}

export const FILE_LIST_MAX = 10_000;

/** The caller's files, newest first by default; keyset pagination after a file id. */
export async function listFiles(
  db: DbOrTx,
  args: { userId: string; limit: number; order: "asc" | "desc"; after?: string | null; purpose?: string | null },
): Promise<{ rows: FileRow[]; hasMore: boolean }> {
  const f = compatFiles;
  let cursor: ReturnType<typeof sql> | undefined;
  if (args.after) {
    const anchor = await getFile(db, { userId: args.userId, fileId: args.after }).catch(() => {
      throw new CompatParamError("after", "after: no such file");
    });
    // Compared in SQL: created_at has microseconds, a JavaScript Date only milliseconds.
    const key = sql`(select created_at, id from compat_files where id = ${anchor.id})`;
    cursor = args.order === "desc" ? sql`(${f.createdAt}, ${f.id}) < ${key}` : sql`(${f.createdAt}, ${f.id}) > ${key}`;
  }
  const order = args.order === "desc" ? [desc(f.createdAt), desc(f.id)] : [asc(f.createdAt), asc(f.id)];
  const rows = await db
    .select()
    .from(f)
    .where(and(eq(f.userId, args.userId), args.purpose ? eq(f.purpose, args.purpose) : undefined, cursor))
    .orderBy(...order)
    .limit(args.limit + 1);
  return { rows: rows.slice(0, args.limit), hasMore: rows.length > args.limit };
}

/** Deletes the caller's file (its chunks go with it). Batches created from it keep running. */
export async function deleteFile(db: DbOrTx, args: { userId: string; fileId: string }): Promise<void> {
  const rows = await db
    .delete(compatFiles)
    .where(and(eq(compatFiles.id, args.fileId), eq(compatFiles.userId, args.userId)))
    .returning({ id: compatFiles.id });
  if (rows.length === 0) throw notFound("file");
}

/** An async iterable of bytes as a Web stream that reads only as the consumer pulls. */
export function toWebStream(source: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const it = source[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const { done, value } = await it.next();
          if (done) controller.close();
          else controller.enqueue(value);
        } catch (err) {
          controller.error(err);
        }
      },
      async cancel() {
        await it.return?.();
      },
    },
    { highWaterMark: 1 },
  );
}
