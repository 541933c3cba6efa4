import "server-only";
import type { FileInfo } from "@/server/workspace/files";

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * `Content-Disposition: attachment` for any file name: RFC 6266 / RFC 5987 `filename*` carries
 * the exact name (UTF-8, percent-encoded), and `filename` an ASCII fallback for old clients
 * with quotes, backslashes, control and non-ASCII characters replaced. Whatever the name, the
 * header is valid (a raw name beyond Latin-1, a quote or a line break would make it a 500).
 */
export function contentDisposition(name: string): string {
  // A lone surrogate cannot be UTF-8 encoded: it becomes U+FFFD.
  const wellFormed = name.replace(LONE_SURROGATE, "\uFFFD");
  const fallback = wellFormed.replace(/[^\x20-\x7e]|["\\]/g, "_");
  const encoded = encodeURIComponent(wellFormed).replace(
    /['()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `attachment; filename="${fallback}"; filename*=UTF-8''${encoded}`;
}

/**
 * Headers of a download: always an attachment (never rendered in our origin), the stored type
 * with sniffing off, and the name as contentDisposition gives it.
 */
export function downloadHeaders(file: FileInfo): Headers {
  return new Headers({
    "content-type": file.contentType,
    "content-length": String(file.size),
    "content-disposition": contentDisposition(file.path.split("/").pop()!),
    "x-content-type-options": "nosniff",
    "cache-control": "private, no-store",
    etag: `"${file.sha256}"`,
  });
}

/** A streamed export answered as a download named `name` (never cached, never sniffed). */
export function downloadResponse(body: ReadableStream<Uint8Array>, contentType: string, name: string): Response {
  return new Response(body, {
    status: 200,
    headers: {
      "content-type": contentType,
      "content-disposition": contentDisposition(name),
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    },
  });
}

/**
 * A download pulled one page at a time: `head` first, then each page `next` reads after the
 * cursor it last returned, until it returns null (`first` null: the head is all). A slow reader holds one page, never the whole.
 */
export function pagedStream<C>(head: string, first: C | null, next: (cursor: C) => Promise<{ text: string; cursor: C | null }>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let cursor: C | null = first;
  let started = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!started) {
        started = true;
        if (head !== "") controller.enqueue(encoder.encode(head));
      }
      if (cursor === null) return controller.close();
      const page = await next(cursor);
      if (page.text !== "") controller.enqueue(encoder.encode(page.text));
      cursor = page.cursor;
      if (cursor === null) controller.close();
    },
  });
}
