import { AppError } from "@/server/errors";

/** Item-page cursors are opaque to clients: base64url of a versioned position. */

export function encodeCursor(position: number): string {
  return Buffer.from(`v1:${position}`, "utf8").toString("base64url");
}

/** Throws validation_failed naming `cursor` for anything this server did not hand out. */
export function decodeCursor(cursor: string): number {
  const text = /^[A-Za-z0-9_-]{1,40}$/.test(cursor) ? Buffer.from(cursor, "base64url").toString("utf8") : "";
  const match = /^v1:(\d{1,9})$/.exec(text);
  if (!match) throw new AppError("validation_failed", "cursor: not a cursor returned by this API");
  return Number(match[1]);
}

/** Pages in item_key order (golden sets): the last key, opaque like the position cursors. */
export function encodeKeyCursor(key: string): string {
  return Buffer.from(`k1:${key}`, "utf8").toString("base64url");
}

export function decodeKeyCursor(cursor: string): string {
  const text = /^[A-Za-z0-9_-]{1,1200}$/.test(cursor) ? Buffer.from(cursor, "base64url").toString("utf8") : "";
  if (!text.startsWith("k1:") || text.length === 3) throw new AppError("validation_failed", "cursor: not a cursor returned by this API");
  return text.slice(3);
}
