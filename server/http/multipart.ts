import "server-only";
import busboy from "busboy";
import { AppError } from "@/server/errors";
import { type NewFile, tooLargeForFile, type WorkspaceLimits } from "@/server/workspace/files";
import { checkPath, checkPrefix, contentTypeFor } from "@/server/workspace/paths";

/**
 * Streams a multipart/form-data upload into workspace files: one or more `file` parts (path =
 * the part's filename, under the optional `prefix` field, which must come first) and nothing
 * else. Each file is yielded when its last byte arrives; the request body is read only as fast
 * as the consumer takes files, so at most one file waits in memory beside the one being stored.
 * A file past max_file_bytes, or a body past what the thread could ever hold, ends the upload
 * with 413 at once, without reading the rest.
 */

/** Multipart framing around the file bytes (boundaries, part headers). */
const FRAMING_ALLOWANCE_BYTES = 1024 * 1024;
const MAX_FILES_PER_UPLOAD = 1000;

export async function* readUploadedFiles(req: Request, limits: WorkspaceLimits): AsyncGenerator<NewFile> {
  const contentType = req.headers.get("content-type") ?? "";
  if (!/^multipart\/form-data\s*;/i.test(contentType))
    throw new AppError("unsupported_media_type", "send the files as multipart/form-data (one or more `file` fields)");
  const maxBodyBytes = limits.maxThreadBytes + FRAMING_ALLOWANCE_BYTES;
  const bodyTooLarge = () =>
    new AppError(
      "payload_too_large",
      `the upload is larger than workspace.max_thread_bytes (${limits.maxThreadBytes} bytes); nothing was stored`,
    );
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > maxBodyBytes) throw bodyTooLarge();
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

  const ready: NewFile[] = [];
  let failure: unknown = null;
  let filesSeen = 0;
  let reading = 0; // file parts whose bytes are still arriving
  let parsed = false;
  let prefix = "";
  let wake: () => void = () => {};
  const fail = (err: unknown) => {
    failure ??= err;
    wake();
  };

  parser.on("field", (name, value) => {
    if (name !== "prefix") return fail(new AppError("validation_failed", `${name}: unknown field (send \`file\` and \`prefix\`)`));
    if (filesSeen > 0) return fail(new AppError("validation_failed", "prefix: must come before the file fields"));
    try {
      prefix = value === "" ? "" : `${checkPrefix(value)}/`;
    } catch (err) {
      fail(err);
    }
  });
  parser.on("file", (name, stream, { filename, mimeType }) => {
    filesSeen++;
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
    reading++;
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("limit", () => fail(tooLargeForFile(path, limits)));
    stream.on("end", () => {
      reading--;
      if (!(stream as { truncated?: boolean }).truncated)
        ready.push({ path, bytes: Buffer.concat(chunks), contentType: contentTypeFor(path, mimeType) });
      wake();
    });
  });
  parser.on("filesLimit", () =>
    fail(new AppError("validation_failed", `file: at most ${MAX_FILES_PER_UPLOAD} files per upload`)),
  );
  parser.on("fieldsLimit", () => fail(new AppError("validation_failed", "prefix: given more than once")));
  parser.on("error", (err: Error) => fail(new AppError("validation_failed", `malformed multipart body: ${err.message}`)));
  parser.on("close", () => {
    parsed = true;
    wake();
  });

  const reader = req.body.getReader();
  let bodyBytes = 0;
  let bodyDone = false;
  // The pending read survives a wake-up: a file can complete (and must be stored) while the
  // client is still sending the next one.
  let pendingRead: Promise<ReadableStreamReadResult<Uint8Array>> | null = null;
  const woken = () =>
    new Promise<null>((resolve) => {
      wake = () => resolve(null);
    });
  try {
    for (;;) {
      if (failure) throw failure;
      const next = ready.shift();
      if (next) {
        yield next;
        continue;
      }
      if (parsed && reading === 0) break;
      if (bodyDone) {
        await woken(); // everything is written to the parser; wait for its last events
        continue;
      }
      pendingRead ??= reader.read();
      const result = await Promise.race([pendingRead, woken()]);
      if (result === null) continue;
      pendingRead = null;
      if (result.done) {
        bodyDone = true;
        parser.end();
        continue;
      }
      bodyBytes += result.value.byteLength;
      if (bodyBytes > maxBodyBytes) throw bodyTooLarge();
      if (!parser.write(result.value))
        await new Promise<void>((resolve) => {
          wake = resolve; // a parse error never drains
          parser.once("drain", resolve);
        });
    }
    if (filesSeen === 0) throw new AppError("validation_failed", "file: at least one file field is required");
  } finally {
    if (!bodyDone) await reader.cancel().catch(() => {});
    // Destroying mid-part makes busboy emit "unexpected end" on itself and the open file part.
    parser.removeAllListeners();
    parser.on("error", () => {});
    parser.destroy();
  }
}
