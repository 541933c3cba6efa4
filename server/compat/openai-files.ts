import type { OpenAiFile } from "@/lib/api/compat";
import type { Db } from "@/server/db/client";
import { AppError, notFound } from "@/server/errors";
import { type CompatBatch, getCompatBatch } from "./batches";
import { expireCompatBatches } from "./expiry";
import { deleteFile, fileChunks, getFile, toWebStream } from "./files";
import { parseFileId } from "./ids";
import { resultFileBytes, resultFileChunks } from "./output";
import { resultFileReady, toOpenAiFile, toVirtualFile } from "./projection";

/**
 * OpenAI file ids name either an uploaded file or one of a batch's generated result files
 * (output / errors, which exist once the batch has ended). Both are owner-scoped.
 */

async function resultFileOf(db: Db, userId: string, batchId: string, kind: "output" | "errors"): Promise<CompatBatch> {
  // The completion window first: an expired batch's files exist (and list its expired requests).
  await expireCompatBatches(db, { userId, api: "openai", id: batchId });
  const current = await getCompatBatch(db, { userId, api: "openai", id: batchId }).catch((err) => {
    if (err instanceof AppError && err.code === "not_found") throw notFound("file");
    throw err;
  });
  if (!resultFileReady(current, kind)) throw notFound("file");
  return current;
}

export async function fileObject(db: Db, args: { userId: string; fileId: string }): Promise<OpenAiFile> {
  const id = parseFileId(args.fileId);
  if (!id) throw notFound("file");
  if (id.kind === "upload") return toOpenAiFile(await getFile(db, { userId: args.userId, fileId: id.id }));
  const current = await resultFileOf(db, args.userId, id.batchId, id.kind);
  return toVirtualFile(current, id.kind, await resultFileBytes(db, current, id.kind));
}

export async function fileContent(
  db: Db,
  args: { userId: string; fileId: string },
): Promise<{ body: ReadableStream<Uint8Array>; filename: string }> {
  const id = parseFileId(args.fileId);
  if (!id) throw notFound("file");
  if (id.kind === "upload") {
    const file = await getFile(db, { userId: args.userId, fileId: id.id });
    return { body: toWebStream(fileChunks(db, file.id)), filename: file.filename };
  }
  const current = await resultFileOf(db, args.userId, id.batchId, id.kind);
  return { body: toWebStream(resultFileChunks(db, current, id.kind)), filename: toVirtualFile(current, id.kind, 0).filename };
}

export async function removeFile(db: Db, args: { userId: string; fileId: string }): Promise<void> {
  const id = parseFileId(args.fileId);
  if (!id) throw notFound("file");
  if (id.kind !== "upload") {
    await resultFileOf(db, args.userId, id.batchId, id.kind);
    throw new AppError("conflict", "a batch's output and error files are generated from its requests and cannot be deleted");
  }
  await deleteFile(db, { userId: args.userId, fileId: id.id });
}
