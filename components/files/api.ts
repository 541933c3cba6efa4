import { type FileProjection, fileListSchema, fileUrl } from "@/lib/api/files";
import { parse, request } from "@/lib/api/client";

/** Browser helpers of the workspace: every answer parsed with the shared projection. */

/**
 * The thread's file list. Whatever writes files (this tab's uploads and deletes, the end of a
 * chat run, a batch whose artifacts changed) invalidates this key; the Files section does not poll.
 */
export const filesKey = (threadId: string) => ["files", threadId] as const;

const base = (threadId: string) => `/api/threads/${encodeURIComponent(threadId)}/files`;

export const batchArtifactsKey = (threadId: string, batchId: string) => ["files", threadId, "batch", batchId] as const;

/** The files a batch's runs wrote (GET .../subagent-batches/{batch_id}/files). */
export async function fetchBatchArtifacts(threadId: string, batchId: string, signal?: AbortSignal): Promise<FileProjection[]> {
  const url = `/api/threads/${encodeURIComponent(threadId)}/subagent-batches/${encodeURIComponent(batchId)}/files`;
  return parse(fileListSchema, await request(url, { signal }), "batch artifacts").files;
}

export async function fetchFiles(threadId: string, signal?: AbortSignal): Promise<FileProjection[]> {
  return parse(fileListSchema, await request(base(threadId), { signal }), "file list").files;
}

/** One multipart request: all files are stored, or none (the server's message says why). */
export async function uploadFiles(threadId: string, files: readonly File[]): Promise<FileProjection[]> {
  const form = new FormData();
  for (const file of files) form.append("file", file, file.name);
  return parse(fileListSchema, await request(base(threadId), { method: "POST", body: form }), "upload answer").files;
}

export async function deleteFile(threadId: string, path: string): Promise<void> {
  await request(fileUrl(encodeURIComponent(threadId), path), { method: "DELETE" });
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(bytes < 10 * 1024 ? 1 : 0)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
