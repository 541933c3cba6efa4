import "server-only";
import type { GoldenItemInput } from "@/lib/api/golden-sets";
import { AppError } from "@/server/errors";
import { receiveFormFile } from "./multipart";
import { BodySpool } from "./spool";
import { parseGoldenUpload } from "./submission-input";

/**
 * A golden set's items uploaded as a file (DESIGN "Reviews that teach": multipart, a CSV or JSONL
 * with `expected`): the form's `file` read whole within http.max_body_bytes, told apart by its
 * name or type, and read by the batch uploads' readers (submission-input.ts parseGoldenUpload).
 */

export function isMultipart(req: Request): boolean {
  return (req.headers.get("content-type") ?? "").toLowerCase().startsWith("multipart/form-data");
}

function formatOf(file: { filename: string; contentType: string }): "csv" | "ndjson" {
  const name = file.filename.toLowerCase();
  const type = file.contentType.toLowerCase();
  if (name.endsWith(".csv") || type === "text/csv") return "csv";
  if (/\.(jsonl|ndjson)$/.test(name) || ["application/x-ndjson", "application/jsonl", "application/x-jsonlines"].includes(type)) return "ndjson";
  throw new AppError("validation_failed", `file: send a .csv or .jsonl file (got ${JSON.stringify(file.filename || file.contentType)})`);
}

/** The form's text fields (each at most `allowed`) and the file's items, checked line by line. */
export async function readGoldenUpload(
  req: Request,
  args: { maxBytes: number; allowed: readonly string[] },
): Promise<{ fields: Record<string, string>; items: GoldenItemInput[] }> {
  const spool = new BodySpool();
  try {
    const file = await receiveFormFile(req, { maxBytes: args.maxBytes }, spool);
    const unknown = Object.keys(file.fields).find((name) => !args.allowed.includes(name));
    if (unknown !== undefined) throw new AppError("validation_failed", `${unknown}: not a field of this upload`);
    const format = formatOf(file);
    const text = (await file.content.bytes()).toString("utf8");
    return { fields: file.fields, items: parseGoldenUpload(format, text) };
  } finally {
    await spool.dispose();
  }
}
