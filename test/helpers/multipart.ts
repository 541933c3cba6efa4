/**
 * Multipart bodies written by hand, byte for byte, for what FormData cannot send: any file
 * name exactly (RFC 5987 `filename*`, so quotes, backslashes and line breaks arrive as such)
 * and bodies a test trickles or cuts short.
 */

export interface RawPart {
  /** The form field name (default `file`). */
  name?: string;
  /** A file part's name; a plain field when absent. */
  filename?: string;
  content: string | Uint8Array;
  type?: string;
}

const rfc5987 = (s: string) => encodeURIComponent(s).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

export function multipartBody(parts: RawPart[], boundary = `----flotilla-raw-${Math.random().toString(36).slice(2)}`) {
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const disposition =
      part.filename === undefined
        ? `form-data; name="${part.name ?? "file"}"`
        : `form-data; name="${part.name ?? "file"}"; filename*=UTF-8''${rfc5987(part.filename)}`;
    const type = part.filename === undefined ? "" : `Content-Type: ${part.type ?? "application/octet-stream"}\r\n`;
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}\r\n${type}\r\n`));
    chunks.push(Buffer.from(part.content));
    chunks.push(Buffer.from("\r\n"));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** The name a Content-Disposition header gives: its `filename*` decoded, else `filename`. */
export function dispositionName(header: string | null): string | null {
  if (!header) return null;
  const star = /filename\*=UTF-8''([^;\s]+)/i.exec(header);
  if (star) return decodeURIComponent(star[1]!);
  return /filename="([^"]*)"/.exec(header)?.[1] ?? null;
}
