import type { FileProjection } from "@/lib/api/files";
import type { FileInfo } from "./files";

export function toFileProjection(file: FileInfo): FileProjection {
  return {
    path: file.path,
    size: file.size,
    sha256: file.sha256,
    content_type: file.contentType,
    created_at: file.createdAt.toISOString(),
    created_by_run_id: file.createdByRunId,
  };
}
