import { tool } from "ai";
import { z } from "zod";
import { AppError } from "@/server/errors";
import { listFiles, putFile, putFileOnce, readFileBytes, workspaceLimits } from "@/server/workspace/files";
import { contentTypeFor, MAX_PATH_CHARS } from "@/server/workspace/paths";
import type { ToolGroup, ToolGroupContext } from "./types";

/**
 * The `workspace` group: the files of the run's thread (uploads and artifacts of earlier runs).
 * Reads are text, bounded by tools.max_output_chars per call (offset/limit page through longer
 * files); writes are recorded with the run that made them and obey the workspace limits.
 * Failures throw, which the AI SDK hands back to the model as a tool error.
 */

/** Most files one list_files answer names (a listing is output too). */
const MAX_LISTED = 500;

function scopeOf(ctx: ToolGroupContext) {
  if (!ctx.threadId) throw new Error("this run has no thread, so it has no workspace");
  return { userId: ctx.userId, threadId: ctx.threadId };
}

/** Tool errors carry the domain's message (path problems, limits, missing files) and nothing internal. */
async function asToolError<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof AppError) throw new Error(err.message);
    throw err;
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The file as text, or null when its bytes are not UTF-8 text. */
function decodeText(bytes: Buffer): string | null {
  try {
    const text = utf8.decode(bytes);
    return text.includes("\u0000") ? null : text;
  } catch {
    return null;
  }
}

/** Written content is text: the extension's type when it has one, else plain text. */
function textTypeFor(path: string): string {
  const guessed = contentTypeFor(path);
  return guessed === "application/octet-stream" ? "text/plain; charset=utf-8" : guessed;
}

const PATH = z.string().min(1).max(MAX_PATH_CHARS).describe("A relative path such as reports/q1.md");
const LIST_INPUT = z.object({ prefix: z.string().max(MAX_PATH_CHARS).optional().describe("A folder, e.g. reports/") });
const WRITE_INPUT = z.object({ path: PATH, content: z.string().describe("The whole new content of the file.") });

/**
 * read_file's input names the configured cap: one schema per cap value, kept for the process
 * like the others. The tools are built per run, and a schema built per run is converted to JSON
 * Schema per run (index.ts converts once per schema object): on a batch item, building and
 * converting the three schemas cost more CPU than the file read itself (bench/workspace).
 */
const readInput = (maxChars: number) =>
  z.object({
    path: PATH,
    offset: z.number().int().min(0).optional().describe("First character to return (default 0)."),
    limit: z.number().int().min(1).optional().describe(`Most characters to return (default and cap ${maxChars}).`),
  });
const readInputs = new Map<number, ReturnType<typeof readInput>>();
function readInputFor(maxChars: number) {
  let schema = readInputs.get(maxChars);
  if (!schema) {
    schema = readInput(maxChars);
    readInputs.set(maxChars, schema);
  }
  return schema;
}

function workspaceTools(ctx: ToolGroupContext) {
  const maxChars = ctx.config.tools.max_output_chars;
  return {
    list_files: tool({
      description:
        "List the files in this thread's workspace (uploaded by the user or written by sub-agents): path, size in " +
        "bytes, content type, and whether an upload or a run wrote it. Pass prefix to list one folder.",
      inputSchema: LIST_INPUT,
      execute: ({ prefix }) =>
        asToolError(async () => {
          const files = await listFiles(ctx.db, { ...scopeOf(ctx), prefix: prefix || undefined });
          return {
            files: files.slice(0, MAX_LISTED).map((f) => ({
              path: f.path,
              size: f.size,
              content_type: f.contentType,
              written_by: f.createdByRunId ? `run ${f.createdByRunId}` : "upload",
            })),
            total: files.length,
            ...(files.length > MAX_LISTED ? { truncated: `only the first ${MAX_LISTED} paths are listed` } : {}),
          };
        }),
    }),
    read_file: tool({
      description:
        `Read a text file of the workspace. Returns at most ${maxChars} characters per call; for longer files call ` +
        "again with offset = next_offset. Binary files are reported, not shown.",
      inputSchema: readInputFor(maxChars),
      execute: ({ path, offset = 0, limit }) =>
        asToolError(async () => {
          const file = await readFileBytes(ctx.db, { ...scopeOf(ctx), path });
          const text = decodeText(file.bytes);
          if (text === null)
            return {
              path,
              binary: true,
              size: file.size,
              content_type: file.contentType,
              message: `${path} is a binary file (${file.size} bytes, ${file.contentType}); read_file returns text only`,
            };
          const count = Math.min(limit ?? maxChars, maxChars);
          const slice = text.slice(offset, offset + count);
          const end = offset + slice.length;
          return {
            path,
            offset,
            text: slice,
            total_chars: text.length,
            next_offset: end < text.length ? end : null,
          };
        }),
    }),
    write_file: tool({
      description:
        "Create or overwrite a text file in the workspace (an artifact the user sees in the Files section). " +
        `Limits: ${ctx.config.workspace.max_file_bytes} bytes a file, ${ctx.config.workspace.max_thread_bytes} bytes a thread.`,
      inputSchema: WRITE_INPUT,
      execute: ({ path, content }, { toolCallId }) =>
        asToolError(async () => {
          const scope = { ...scopeOf(ctx), limits: workspaceLimits(ctx.config), runId: ctx.runId };
          const newFile = { path, bytes: Buffer.from(content, "utf8"), contentType: textTypeFor(path) };
          const key = ctx.idempotencyKey?.(toolCallId);
          if (key === undefined) {
            const file = await putFile(ctx.db, scope, newFile);
            return { path: file.path, size: file.size, sha256: file.sha256 };
          }
          // A batch item's step repeated by a later attempt: the first write stands.
          const once = await putFileOnce(ctx.db, { ...scope, idempotencyKey: key }, newFile);
          if (!once.file) return { path, replayed: true, message: `${path} was written by an earlier attempt of this step` };
          return { path: once.file.path, size: once.file.size, sha256: once.file.sha256, ...(once.replayed ? { replayed: true } : {}) };
        }),
    }),
  };
}

export const workspaceGroup: ToolGroup = {
  name: "workspace",
  description: "The thread's files: list_files, read_file (text, paged), write_file (artifacts).",
  build: workspaceTools,
};
