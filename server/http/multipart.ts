import "server-only";
import type { Readable } from "node:stream";
import busboy from "busboy";
import { CompatParamError } from "@/server/compat/errors";
import { AppError } from "@/server/errors";
import { type NewFile, tooLargeForFile, type WorkspaceLimits } from "@/server/workspace/files";
import { checkPath, checkPrefix, contentTypeFor } from "@/server/workspace/paths";
import type { BodySpool, SpoolEntry } from "./spool";

/**
 * Multipart uploads, received whole before anything is written: the body is parsed as it
 * arrives (so a file past its limit ends the upload with 413 at once, without reading the
 * rest) and each file waits in the request's spool. Only then does the caller open its
 * transaction, so a client trickling its body holds no database connection.
 */

/** Multipart framing around the file bytes (boundaries, part headers). */
const FRAMING_ALLOWANCE_BYTES = 1024 * 1024;
const MAX_FILES_PER_UPLOAD = 1000;

/**
 * A one-file form: every text field lands in `fields`, the first part named `file` goes to
 * `onFile`, and any other file part is drained unread (so the body can still be parsed to its end).
 */
function takeFilePart(parser: busboy.Busboy, fields: Record<string, string>, onFile: (stream: Readable, info: busboy.FileInfo) => void): void {
  let taken = false;
  parser.on("field", (name, value) => {
    fields[name] = value;
  });
  parser.on("file", (name, stream, info) => {
    stream.on("error", () => {});
    if (name !== "file" || taken) {
      stream.resume();
      return;
    }
    taken = true;
    onFile(stream, info);
  });
}

/**
 * Feeds the request body to a busboy parser, chunk by chunk, waiting for the spool to take each
 * one (backpressure down to the socket). Resolves once the parser has seen the whole body;
 * rejects with the first failure any handler reported through `fail`.
 */
async function parseBody(
  req: Request,
  parser: busboy.Busboy,
  spool: BodySpool,
  limits: { maxBodyBytes: number; tooLarge: () => AppError },
  failure: { current: unknown; wake: () => void },
): Promise<void> {
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > limits.maxBodyBytes) throw limits.tooLarge();
  const closed = new Promise<void>((resolve) => parser.on("close", resolve));
  const failed = new Promise<never>((_, reject) => {
    failure.wake = () => reject(failure.current);
  });
  failed.catch(() => {});
  parser.on("error", (err: Error) => report(failure, new AppError("validation_failed", `malformed multipart body: ${err.message}`)));
  const reader = req.body!.getReader();
  let bodyBytes = 0;
  let bodyDone = false;
  try {
    for (;;) {
      if (failure.current) throw failure.current;
      const result = await Promise.race([
        reader.read().catch(() => {
          throw new AppError("validation_failed", "the request body ended before it was complete; nothing was stored");
        }),
        failed,
      ]);
      if (result.done) {
        bodyDone = true;
        break;
      }
      bodyBytes += result.value.byteLength;
      if (bodyBytes > limits.maxBodyBytes) throw limits.tooLarge();
      if (!parser.write(result.value)) await Promise.race([new Promise((resolve) => parser.once("drain", resolve)), failed]);
      await Promise.race([spool.settled(), failed]);
    }
    parser.end();
    await Promise.race([closed, failed]);
    await spool.settled();
    if (failure.current) throw failure.current;
  } finally {
    if (!bodyDone) await reader.cancel().catch(() => {});
    // Destroying mid-part makes busboy emit "unexpected end" on itself and the open file part.
    parser.removeAllListeners();
    parser.on("error", () => {});
    parser.destroy();
  }
}

function report(failure: { current: unknown; wake: () => void }, err: unknown): void {
  if (failure.current) return;
  failure.current = err;
  failure.wake();
}

export interface ReceivedWorkspaceFile {
  path: string;
  contentType: string;
  content: SpoolEntry;
}

/**
 * Receives a workspace upload (multipart/form-data): one or more `file` parts (path = the part's
 * filename, under the optional `prefix` field, which must come first) and nothing else. A file
 * past max_file_bytes, or a body past what the thread could ever hold, is a 413 at once.
 */
export async function receiveWorkspaceUpload(
  req: Request,
  limits: WorkspaceLimits,
  spool: BodySpool,
): Promise<ReceivedWorkspaceFile[]> {
  const contentType = req.headers.get("content-type") ?? "";
  if (!/^multipart\/form-data\s*;/i.test(contentType))
    throw new AppError("unsupported_media_type", "send the files as multipart/form-data (one or more `file` fields)");
  if (!req.body) throw new AppError("validation_failed", "file: at least one file field is required");
  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: { "content-type": contentType },
      preservePath: true, // the filename is the workspace path, folders included
      defParamCharset: "utf8",
      // busboy stops a part when it reaches fileSize: one byte past the limit is the first refused.
      limits: { fileSize: limits.maxFileBytes + 1, files: MAX_FILES_PER_UPLOAD, fields: 1, fieldSize: 1024, parts: MAX_FILES_PER_UPLOAD + 1 },
    });
  } catch {
    throw new AppError("validation_failed", "content-type: multipart/form-data needs a boundary");
  }

  const failure = { current: null as unknown, wake: () => {} };
  const fail = (err: unknown) => report(failure, err);
  const received: ReceivedWorkspaceFile[] = [];
  let prefix = "";

  parser.on("field", (name, value) => {
    if (name !== "prefix") return fail(new AppError("validation_failed", `${name}: unknown field (send \`file\` and \`prefix\`)`));
    if (received.length > 0) return fail(new AppError("validation_failed", "prefix: must come before the file fields"));
    try {
      prefix = value === "" ? "" : `${checkPrefix(value)}/`;
    } catch (err) {
      fail(err);
    }
  });
  parser.on("file", (name, stream, { filename, mimeType }) => {
    stream.on("error", () => {}); // reported through the parser's own error
    if (name !== "file") {
      stream.resume();
      return fail(new AppError("validation_failed", `${name}: unknown field (send \`file\` and \`prefix\`)`));
    }
    let path: string;
    try {
      if (!filename) throw new AppError("validation_failed", "file: every file part needs a filename (its path)");
      path = checkPath(prefix + filename, "file");
    } catch (err) {
      stream.resume();
      return fail(err);
    }
    const content = spool.entry();
    received.push({ path, contentType: contentTypeFor(path, mimeType), content });
    stream.on("data", (chunk: Buffer) => content.write(chunk));
    stream.on("limit", () => fail(tooLargeForFile(path, limits)));
  });
  parser.on("filesLimit", () =>
    fail(new AppError("validation_failed", `file: at most ${MAX_FILES_PER_UPLOAD} files per upload`)),
  );
  parser.on("fieldsLimit", () => fail(new AppError("validation_failed", "prefix: given more than once")));

  await parseBody(
    req,
    parser,
    spool,
    {
      maxBodyBytes: limits.maxThreadBytes + FRAMING_ALLOWANCE_BYTES,
      tooLarge: () =>
        new AppError(
          "payload_too_large",
          `the upload is larger than workspace.max_thread_bytes (${limits.maxThreadBytes} bytes); nothing was stored`,
        ),
    },
    failure,
  );
  if (received.length === 0) throw new AppError("validation_failed", "file: at least one file field is required");
  return received;
}

/**
 * The received files one at a time, each read back whole (a workspace file is bounded by
 * max_file_bytes), in bytewise path order: two uploads overwriting the same files lock their
 * rows in the same order, so the second waits for the first instead of deadlocking.
 */
export async function* receivedFiles(files: ReceivedWorkspaceFile[]): AsyncGenerator<NewFile> {
  const ordered = [...files].sort((a, b) => Buffer.compare(Buffer.from(a.path), Buffer.from(b.path)));
  for (const file of ordered) yield { path: file.path, contentType: file.contentType, bytes: await file.content.bytes() };
}

export interface ReceivedBatchFile {
  filename: string;
  bytes: number;
  lines: number;
  content: SpoolEntry;
}

const NEWLINE = 0x0a;

/**
 * Receives an OpenAI batch input file (multipart: a `file` part and purpose=batch, which the SDKs
 * send after the file, so it is checked once the body has been read). A file over
 * compat.max_file_bytes (413) or with more than compat.max_requests_per_file lines (400) is
 * refused as soon as it gets there.
 */
export async function receiveBatchFile(
  req: Request,
  limits: { maxBytes: number; maxLines: number },
  spool: BodySpool,
): Promise<ReceivedBatchFile> {
  const contentType = req.headers.get("content-type");
  if (!contentType?.toLowerCase().startsWith("multipart/form-data") || !req.body)
    throw new AppError("unsupported_media_type", "send multipart/form-data with a `file` part and purpose=batch");
  let parser: busboy.Busboy;
  try {
    parser = busboy({
      headers: { "content-type": contentType },
      // The name as the client sent it: busboy's default keeps only what follows the last / or \.
      preservePath: true,
      defParamCharset: "utf8",
      limits: { files: 1, fields: 20, fieldSize: 4096 },
    });
  } catch {
    throw new AppError("validation_failed", "file: the multipart body is malformed");
  }
  const failure = { current: null as unknown, wake: () => {} };
  const fail = (err: unknown) => report(failure, err);
  const tooLarge = () => new AppError("payload_too_large", `file: larger than compat.max_file_bytes (${limits.maxBytes} bytes)`);
  const tooManyLines = () =>
    new CompatParamError("file", `file: more than compat.max_requests_per_file (${limits.maxLines}) lines`);
  const fields: Record<string, string> = {};
  let file: ReceivedBatchFile | null = null;
  let last = NEWLINE;

  takeFilePart(parser, fields, (stream, info) => {
    const current: ReceivedBatchFile = { filename: (info.filename || "upload.jsonl").slice(0, 255), bytes: 0, lines: 0, content: spool.entry() };
    file = current;
    stream.on("data", (chunk: Buffer) => {
      current.bytes += chunk.length;
      if (current.bytes > limits.maxBytes) return fail(tooLarge());
      for (let i = chunk.indexOf(NEWLINE); i >= 0; i = chunk.indexOf(NEWLINE, i + 1)) current.lines++;
      if (current.lines > limits.maxLines) return fail(tooManyLines());
      last = chunk[chunk.length - 1] ?? last;
      current.content.write(chunk);
    });
  });

  try {
    await parseBody(req, parser, spool, { maxBodyBytes: limits.maxBytes + FRAMING_ALLOWANCE_BYTES, tooLarge }, failure);
  } catch (err) {
    if (err instanceof AppError) throw err;
    throw new AppError("validation_failed", "file: the multipart body is malformed or incomplete");
  }
  const received = file as ReceivedBatchFile | null;
  if (!received) throw new CompatParamError("file", "file: a `file` part is required");
  if (received.bytes > 0 && last !== NEWLINE) received.lines++;
  if (received.lines > limits.maxLines) throw tooManyLines();
  if (fields.purpose !== "batch")
    throw new CompatParamError("purpose", `purpose: only "batch" is supported, got ${JSON.stringify(fields.purpose ?? null)}`);
  return received;
}

/** A form's one file (part `file`) and its text fields, the file waiting in the request's spool. */
export interface ReceivedFormFile {
  filename: string;
  contentType: string;
  fields: Record<string, string>;
  content: SpoolEntry;
}

/**
 * Receives a multipart form carrying one file in its `file` part (a golden set's CSV or JSONL)
 * and a few short text fields: 413 as soon as the body passes `maxBytes`, 400 naming `file` when
 * the part is missing or the body is malformed.
 */
export async function receiveFormFile(req: Request, limits: { maxBytes: number }, spool: BodySpool): Promise<ReceivedFormFile> {
  const contentType = req.headers.get("content-type");
  if (!contentType?.toLowerCase().startsWith("multipart/form-data") || !req.body)
    throw new AppError("unsupported_media_type", "send multipart/form-data with a `file` part");
  let parser: busboy.Busboy;
  try {
    parser = busboy({ headers: { "content-type": contentType }, defParamCharset: "utf8", limits: { files: 1, fields: 20, fieldSize: 4096 } });
  } catch {
    throw new AppError("validation_failed", "file: the multipart body is malformed");
  }
  const failure = { current: null as unknown, wake: () => {} };
  const tooLarge = () => new AppError("payload_too_large", `file: larger than http.max_body_bytes (${limits.maxBytes} bytes)`);
  const fields: Record<string, string> = {};
  let file: ReceivedFormFile | null = null;
  takeFilePart(parser, fields, (stream, info) => {
    const current: ReceivedFormFile = { filename: info.filename ?? "", contentType: info.mimeType ?? "", fields, content: spool.entry() };
    file = current;
    stream.on("data", (chunk: Buffer) => current.content.write(chunk));
  });
  try {
    await parseBody(req, parser, spool, { maxBodyBytes: limits.maxBytes, tooLarge }, failure);
  } catch (err) {
    if (err instanceof AppError) throw err;
    throw new AppError("validation_failed", "file: the multipart body is malformed or incomplete");
  }
  if (!file) throw new AppError("validation_failed", "file: a `file` part is required (a CSV or JSONL file)");
  return file;
}
