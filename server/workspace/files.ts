import { createHash } from "node:crypto";
import { and, eq, inArray, isNotNull, sql } from "drizzle-orm";
import { fileGlobMatcher, globProblem, MAX_GLOB_CHARS } from "@/lib/api/files";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import {
  subagentBatches,
  subagentBatchItemAttempts,
  subagentBatchItems,
  threads,
  workspaceFiles,
  workspaceWriteKeys,
} from "@/server/db/schema";
import { AppError, notFound } from "@/server/errors";
import { checkPath, checkPrefix } from "./paths";
import { checkStorageQuota } from "./storage";

/**
 * A thread's workspace: files in PostgreSQL, shared by the web process and every worker. Every
 * function takes the database first and the owner scope (user + thread): another user's thread
 * or file is "not found". No Next.js imports: workers load this module.
 */

export interface WorkspaceScope {
  userId: string;
  threadId: string;
}

export interface WorkspaceLimits {
  maxFileBytes: number;
  maxThreadBytes: number;
  /** quotas.max_storage_bytes: the owner's workspace files and /v1 files together. */
  maxStorageBytes: number;
}

export function workspaceLimits(config: FlotillaConfig): WorkspaceLimits {
  return {
    maxFileBytes: config.workspace.max_file_bytes,
    maxThreadBytes: config.workspace.max_thread_bytes,
    maxStorageBytes: config.quotas.max_storage_bytes,
  };
}

/** What a listing shows of a file (never its bytes). */
export interface FileInfo {
  path: string;
  size: number;
  sha256: string;
  contentType: string;
  createdAt: Date;
  createdByRunId: string | null;
}

export interface NewFile {
  path: string;
  bytes: Buffer;
  contentType: string;
}

const info = {
  path: workspaceFiles.path,
  size: workspaceFiles.size,
  sha256: workspaceFiles.sha256,
  contentType: workspaceFiles.contentType,
  createdAt: workspaceFiles.createdAt,
  createdByRunId: workspaceFiles.createdByRunId,
};

const owned = (scope: WorkspaceScope) =>
  and(eq(workspaceFiles.threadId, scope.threadId), eq(workspaceFiles.userId, scope.userId));

/** Bytewise path order, whatever the database's collation. */
const byPath = sql`${workspaceFiles.path} collate "C"`;

async function assertThread(db: DbOrTx, scope: WorkspaceScope): Promise<void> {
  const [row] = await db
    .select({ id: threads.id })
    .from(threads)
    .where(and(eq(threads.id, scope.threadId), eq(threads.userId, scope.userId)));
  if (!row) throw notFound("thread");
}

export const tooLargeForFile = (path: string, limits: WorkspaceLimits) =>
  new AppError(
    "payload_too_large",
    `${path}: larger than workspace.max_file_bytes (${limits.maxFileBytes} bytes); nothing was stored`,
  );

/** The files of the thread in path order, optionally under a folder prefix. */
export async function listFiles(db: DbOrTx, scope: WorkspaceScope & { prefix?: string }): Promise<FileInfo[]> {
  await assertThread(db, scope);
  const prefix = scope.prefix ? `${checkPrefix(scope.prefix)}/` : null;
  return db
    .select(info)
    .from(workspaceFiles)
    .where(and(owned(scope), prefix ? sql`starts_with(${workspaceFiles.path}, ${prefix})` : undefined))
    .orderBy(byPath);
}

/**
 * The artifacts of a batch: files of its thread last written by a run of one of its items (the
 * item's current run or an earlier attempt's), in path order. 404 unless the batch is this
 * owner's in this thread. A file a later upload or another run overwrote is no longer the batch's.
 */
export async function listBatchArtifacts(db: DbOrTx, scope: WorkspaceScope & { batchId: string }): Promise<FileInfo[]> {
  const [batch] = await db
    .select({ id: subagentBatches.id })
    .from(subagentBatches)
    .where(
      and(
        eq(subagentBatches.id, scope.batchId),
        eq(subagentBatches.threadId, scope.threadId),
        eq(subagentBatches.userId, scope.userId),
      ),
    );
  if (!batch) throw notFound("batch");
  const itemRuns = db
    .select({ runId: subagentBatchItems.runId })
    .from(subagentBatchItems)
    .where(and(eq(subagentBatchItems.batchId, scope.batchId), isNotNull(subagentBatchItems.runId)))
    .union(
      // Through the items (their batch index, then the attempts' item index): attempts have no batch index.
      db
        .select({ runId: subagentBatchItemAttempts.runId })
        .from(subagentBatchItemAttempts)
        .innerJoin(subagentBatchItems, eq(subagentBatchItems.id, subagentBatchItemAttempts.itemId))
        .where(and(eq(subagentBatchItems.batchId, scope.batchId), isNotNull(subagentBatchItemAttempts.runId))),
    );
  return db
    .select(info)
    .from(workspaceFiles)
    .where(and(owned(scope), inArray(workspaceFiles.createdByRunId, itemRuns)))
    .orderBy(byPath);
}

/** One file's listing row; 404 naming the path when absent. */
export async function getFileInfo(db: DbOrTx, scope: WorkspaceScope & { path: string }): Promise<FileInfo> {
  checkPath(scope.path);
  const [row] = await db
    .select(info)
    .from(workspaceFiles)
    .where(and(owned(scope), eq(workspaceFiles.path, scope.path)));
  if (!row) throw notFound(`file ${JSON.stringify(scope.path)}`);
  return row;
}

/**
 * Creates or overwrites files in one transaction: all of them or none. `files` may be an async
 * iterable (an upload's files read back one at a time from its spool), so at most one file is
 * in memory here; it must not wait on a client, since the transaction holds a connection.
 * Limits: each file ≤ max_file_bytes, the thread's total after the write ≤ max_thread_bytes,
 * and the owner's storage ≤ quotas.max_storage_bytes. Both totals are checked last, each under
 * its transaction lock (thread, then user): a second writer's check waits for the first to
 * commit and then counts its rows, so two uploads that fit alone but not together cannot both
 * succeed.
 */
export async function putFiles(
  db: Db,
  scope: WorkspaceScope & { limits: WorkspaceLimits; runId?: string | null },
  files: Iterable<NewFile> | AsyncIterable<NewFile>,
): Promise<FileInfo[]> {
  try {
    return await writeAll(db, scope, files);
  } catch (err) {
    // Two uploads overwriting the same paths in opposite orders: PostgreSQL aborts one of them.
    if (postgresCode(err) === "40P01")
      throw new AppError("conflict", "another upload wrote the same files at the same moment; nothing was stored, retry");
    throw err;
  }
}

function postgresCode(err: unknown): string | undefined {
  for (let e = err, depth = 0; e && typeof e === "object" && depth < 5; e = (e as { cause?: unknown }).cause, depth++)
    if ("code" in e && typeof e.code === "string") return e.code;
  return undefined;
}

async function writeAll(
  db: Db,
  scope: WorkspaceScope & { limits: WorkspaceLimits; runId?: string | null },
  files: Iterable<NewFile> | AsyncIterable<NewFile>,
): Promise<FileInfo[]> {
  return db.transaction(async (tx) => {
    await assertThread(tx, scope);
    const written: FileInfo[] = [];
    const seen = new Set<string>();
    for await (const file of files) {
      checkPath(file.path);
      if (seen.has(file.path)) throw new AppError("validation_failed", `${file.path}: given twice in one upload`);
      seen.add(file.path);
      if (file.bytes.byteLength > scope.limits.maxFileBytes) throw tooLargeForFile(file.path, scope.limits);
      written.push(await upsert(tx, scope, file));
    }
    await checkThreadTotal(tx, scope);
    await checkStorageQuota(tx, { userId: scope.userId, maxStorageBytes: scope.limits.maxStorageBytes });
    return written;
  });
}

/** One file (create or overwrite); same limits and atomicity as putFiles. */
export async function putFile(
  db: Db,
  scope: WorkspaceScope & { limits: WorkspaceLimits; runId?: string | null },
  file: NewFile,
): Promise<FileInfo> {
  const [written] = await putFiles(db, scope, [file]);
  return written!;
}

/**
 * A batch item's write under its call's idempotency key (server/batches/steps.ts): the first
 * write of that key and path in the thread writes the file and records the key in the same
 * transaction; a replay (a later attempt repeating the step) writes nothing and returns the
 * file as it is now (`replayed`; `file` null when it was deleted since).
 */
export async function putFileOnce(
  db: Db,
  scope: WorkspaceScope & { limits: WorkspaceLimits; runId?: string | null; idempotencyKey: string },
  file: NewFile,
): Promise<{ replayed: false; file: FileInfo } | { replayed: true; file: FileInfo | null }> {
  checkPath(file.path);
  return db.transaction(async (tx) => {
    await assertThread(tx, scope);
    const [fresh] = await tx
      .insert(workspaceWriteKeys)
      .values({ threadId: scope.threadId, idempotencyKey: scope.idempotencyKey, path: file.path })
      .onConflictDoNothing()
      .returning({ path: workspaceWriteKeys.path });
    if (!fresh) {
      const [current] = await tx
        .select(info)
        .from(workspaceFiles)
        .where(and(owned(scope), eq(workspaceFiles.path, file.path)));
      return { replayed: true as const, file: current ?? null };
    }
    if (file.bytes.byteLength > scope.limits.maxFileBytes) throw tooLargeForFile(file.path, scope.limits);
    const written = await upsert(tx, scope, file);
    await checkThreadTotal(tx, scope);
    await checkStorageQuota(tx, { userId: scope.userId, maxStorageBytes: scope.limits.maxStorageBytes });
    return { replayed: false as const, file: written };
  });
}

type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];

async function upsert(tx: Tx, scope: WorkspaceScope & { runId?: string | null }, file: NewFile): Promise<FileInfo> {
  const values = {
    userId: scope.userId,
    threadId: scope.threadId,
    path: file.path,
    bytes: file.bytes,
    size: file.bytes.byteLength,
    sha256: createHash("sha256").update(file.bytes).digest("hex"),
    contentType: file.contentType,
    createdByRunId: scope.runId ?? null,
  };
  const [row] = await tx
    .insert(workspaceFiles)
    .values(values)
    .onConflictDoUpdate({
      target: [workspaceFiles.threadId, workspaceFiles.path],
      set: {
        bytes: values.bytes,
        size: values.size,
        sha256: values.sha256,
        contentType: values.contentType,
        createdByRunId: values.createdByRunId,
        createdAt: sql`now()`,
      },
    })
    .returning(info);
  return row!;
}

async function checkThreadTotal(tx: Tx, scope: WorkspaceScope & { limits: WorkspaceLimits }) {
  // Transaction-scoped, per thread; released at commit or rollback. The sum is a separate
  // statement so (read committed) its snapshot is taken after the lock is held.
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`workspace:${scope.threadId}`}, 0))`);
  const [row] = await tx
    .select({ total: sql<number>`coalesce(sum(${workspaceFiles.size}), 0)::float8` })
    .from(workspaceFiles)
    .where(eq(workspaceFiles.threadId, scope.threadId));
  const total = Number(row?.total ?? 0);
  if (total > scope.limits.maxThreadBytes)
    throw new AppError(
      "payload_too_large",
      `the thread's files would total ${total} bytes, more than workspace.max_thread_bytes ` +
        `(${scope.limits.maxThreadBytes} bytes); nothing was stored`,
    );
}

/**
 * readFileBytes's statement, built and prepared once per handle: a batch over files reads one
 * file per item (read_file), and building, parsing and planning the query every time cost
 * several times the read itself (bench/workspace).
 */
const readStatements = new WeakMap<DbOrTx, ReturnType<typeof prepareRead>>();
function prepareRead(db: DbOrTx) {
  return db
    .select({ ...info, bytes: workspaceFiles.bytes })
    .from(workspaceFiles)
    .where(
      and(
        eq(workspaceFiles.threadId, sql.placeholder("threadId")),
        eq(workspaceFiles.userId, sql.placeholder("userId")),
        eq(workspaceFiles.path, sql.placeholder("path")),
      ),
    )
    .prepare("workspace_read_file");
}

/** The whole file (bounded by max_file_bytes at write time). */
export async function readFileBytes(db: DbOrTx, scope: WorkspaceScope & { path: string }): Promise<NewFile & FileInfo> {
  checkPath(scope.path);
  let statement = readStatements.get(db);
  if (!statement) {
    statement = prepareRead(db);
    readStatements.set(db, statement);
  }
  const [row] = await statement.execute({ threadId: scope.threadId, userId: scope.userId, path: scope.path });
  if (!row) throw notFound(`file ${JSON.stringify(scope.path)}`);
  return row;
}

/** Download slices: small enough to keep memory flat, large enough to keep round trips few. */
export const DOWNLOAD_SLICE_BYTES = 256 * 1024;

/**
 * The file's listing row and a stream of its bytes, read slice by slice (substring of an
 * uncompressed out-of-line bytea reads only the chunks it needs). Each slice is pinned to the
 * version that was opened: a file overwritten or deleted mid-download ends the stream with an
 * error instead of mixing two versions.
 */
export async function openFileStream(
  db: Db,
  scope: WorkspaceScope & { path: string },
): Promise<{ file: FileInfo; body: ReadableStream<Uint8Array> }> {
  const file = await getFileInfo(db, scope);
  let offset = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (offset >= file.size) {
        controller.close();
        return;
      }
      const [row] = await db
        .select({ slice: sql<Buffer>`substring(${workspaceFiles.bytes} from ${offset + 1}::int for ${DOWNLOAD_SLICE_BYTES}::int)` })
        .from(workspaceFiles)
        .where(and(owned(scope), eq(workspaceFiles.path, scope.path), eq(workspaceFiles.sha256, file.sha256)));
      if (!row) {
        controller.error(new Error(`${scope.path} changed during the download`));
        return;
      }
      offset += row.slice.byteLength;
      controller.enqueue(new Uint8Array(row.slice.buffer, row.slice.byteOffset, row.slice.byteLength));
    },
    // Read a slice only when the client takes one: a slow download holds one slice, not the file.
  }, new CountQueuingStrategy({ highWaterMark: 0 }));
  return { file, body };
}

/** Deletes one file; 404 naming the path when absent. */
export async function deleteFile(db: DbOrTx, scope: WorkspaceScope & { path: string }): Promise<void> {
  checkPath(scope.path);
  const rows = await db
    .delete(workspaceFiles)
    .where(and(owned(scope), eq(workspaceFiles.path, scope.path)))
    .returning({ path: workspaceFiles.path });
  if (rows.length === 0) throw notFound(`file ${JSON.stringify(scope.path)}`);
}

/** Paths read per page when matching a glob: the thread's file count never sets the memory held. */
const MATCH_PAGE = 1000;

/**
 * Paths of the thread's files matching a glob (fileGlobMatcher: linear in each path), in path
 * order, read a page at a time so a caller can stop early (a bound reached) without loading the
 * rest. 400 naming the field for an empty, overlong or refused glob.
 */
export async function* matchingPaths(db: DbOrTx, scope: WorkspaceScope & { glob: string; field?: string }): AsyncGenerator<string> {
  const field = scope.field ?? "files";
  if (scope.glob.trim() === "" || scope.glob.length > MAX_GLOB_CHARS)
    throw new AppError("validation_failed", `${field}: a glob of 1 to ${MAX_GLOB_CHARS} characters is required`);
  const syntax = globProblem(scope.glob);
  if (syntax) throw new AppError("validation_failed", `${field}: ${syntax}`);
  const isMatch = fileGlobMatcher(scope.glob);
  await assertThread(db, scope);
  let after: string | null = null;
  for (;;) {
    const page: { path: string }[] = await db
      .select({ path: workspaceFiles.path })
      .from(workspaceFiles)
      .where(and(owned(scope), after === null ? undefined : sql`${byPath} > ${after}`))
      .orderBy(byPath)
      .limit(MATCH_PAGE);
    for (const { path } of page) if (isMatch(path)) yield path;
    if (page.length < MATCH_PAGE) return;
    after = page.at(-1)!.path;
  }
}

/** Every matching path (for callers whose thread bounds are enough; a batch uses matchingPaths). */
export async function matchFiles(db: DbOrTx, scope: WorkspaceScope & { glob: string; field?: string }): Promise<string[]> {
  const paths: string[] = [];
  for await (const path of matchingPaths(db, scope)) paths.push(path);
  return paths;
}
