import { and, asc, desc, eq, sql } from "drizzle-orm";
import type { Db, DbOrTx } from "@/server/db/client";
import { compatFileChunks, compatFiles } from "@/server/db/schema";
import { notFound } from "@/server/errors";
import { checkStorageQuota } from "@/server/workspace/storage";
import { storableText } from "@/server/db/storable";
import { CompatParamError } from "./errors";

/**
 * Uploaded batch input files (OpenAI /v1/files), per user. An upload, received whole first
 * (server/http/multipart.ts), is written as ~1 MiB chunk rows inside one transaction (a failed or
 * refused upload leaves nothing), so a 200 MB file never sits in memory; content is streamed
 * back the same way.
 */

export type FileRow = typeof compatFiles.$inferSelect;

export const CHUNK_BYTES = 1024 * 1024;

export async function getFile(db: DbOrTx, args: { userId: string; fileId: string }): Promise<FileRow> {
  const [row] = await db
    .select()
    .from(compatFiles)
    .where(and(eq(compatFiles.id, args.fileId), eq(compatFiles.userId, args.userId)));
  if (!row) throw notFound("file");
  return row;
}

/**
 * Stores a received upload (its bytes and lines already counted and within the limits) as ~1
 * MiB chunk rows in one transaction: a refused upload leaves nothing. `chunks` must not wait on
 * a client (it reads the request's spool), since the transaction holds a connection. The
 * owner's storage quota is checked last, under their lock.
 */
export async function storeFile(
  db: Db,
  args: {
    userId: string;
    filename: string;
    bytes: number;
    lines: number;
    chunks: AsyncIterable<Buffer>;
    maxStorageBytes: number;
  },
): Promise<FileRow> {
  return db.transaction(async (tx) => {
    const [file] = await tx
      .insert(compatFiles)
      .values({ userId: args.userId, filename: storableText(args.filename), purpose: "batch", bytes: args.bytes, lines: args.lines })
      .returning();
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
    for await (const chunk of args.chunks) {
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= CHUNK_BYTES) await flush();
    }
    await flush();
    await checkStorageQuota(tx, { userId: args.userId, maxStorageBytes: args.maxStorageBytes });
    return file!;
  });
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
