import "server-only";
import type { FileInfo } from "@/server/workspace/files";

/**
 * Headers of a download: always an attachment (never rendered in our origin), the stored type
 * with sniffing off, and the name as RFC 6266 / RFC 5987 `filename*` for non-ASCII names with
 * an ASCII fallback for old clients.
 */
export function downloadHeaders(file: FileInfo): Headers {
  const name = file.path.split("/").pop()!;
  const fallback = name.replace(/[^\x20-\x7e]|["\\]/g, "_");
  const encoded = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return new Headers({
    "content-type": file.contentType,
    "content-length": String(file.size),
    "content-disposition": `attachment; filename="${fallback}"; filename*=UTF-8''${encoded}`,
    "x-content-type-options": "nosniff",
    "cache-control": "private, no-store",
    etag: `"${file.sha256}"`,
  });
}
