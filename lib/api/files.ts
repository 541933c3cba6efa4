import { z } from "zod";

/** Public projections of a thread's workspace files (snake_case JSON); never the bytes. */
export const fileProjectionSchema = z
  .object({
    path: z.string(),
    size: z.number(),
    sha256: z.string(),
    content_type: z.string(),
    created_at: z.string(),
    /** The sub-agent run that wrote the file; null for an upload. */
    created_by_run_id: z.string().nullable(),
  })
  .strict();
export type FileProjection = z.infer<typeof fileProjectionSchema>;

export const fileListSchema = z.object({ files: z.array(fileProjectionSchema) }).strict();
export type FileList = z.infer<typeof fileListSchema>;

export const FILE_PLACEHOLDER = "{{file}}";

/** The download URL of a file: each path segment encoded on its own, `/` kept. */
export function fileUrl(threadId: string, path: string): string {
  return `/api/threads/${threadId}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
}
