import { z } from "zod";
import { FILE_PLACEHOLDER, GLOB_MAX_CHARS } from "@/lib/batch-rules";
import { compileGlob, GlobError } from "@/lib/glob";
import { promptTemplateSchema, type SubmitBatchInput, submissionFieldsShape } from "./batches";
import { goldenSetRefSchema } from "./golden-sets";

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

export { FILE_PLACEHOLDER };
/** Longest `files` glob a submission accepts. */
export const MAX_GLOB_CHARS = GLOB_MAX_CHARS;

/** The download URL of a file: each path segment encoded on its own, `/` kept. */
export function fileUrl(threadId: string, path: string): string {
  return `/api/threads/${threadId}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
}

/**
 * A batch over workspace files (JSON): `files` is a glob instead of `items`, and the template's
 * {{file}} is each matching path. One item per file in path order, item_key = the path.
 */
export const submitFileBatchSchema = z
  .object({
    ...submissionFieldsShape,
    files: z.string().min(1, "must be a glob such as reports/*.md").max(MAX_GLOB_CHARS, `must be at most ${MAX_GLOB_CHARS} characters`),
    prompt_template: promptTemplateSchema.refine((t) => t.includes(FILE_PLACEHOLDER), `must contain ${FILE_PLACEHOLDER}`),
  })
  .strict();
export type SubmitFileBatchInput = z.infer<typeof submitFileBatchSchema>;

/**
 * A run against a golden set (DESIGN "Reviews that teach"): the items, each with its `expected`,
 * come from the set's version (the newest when omitted), instead of `items` or a glob.
 */
export const submitGoldenBatchSchema = z
  .object({
    ...submissionFieldsShape,
    golden_set: goldenSetRefSchema,
    prompt_template: promptTemplateSchema.optional(),
  })
  .strict();
export type SubmitGoldenBatchInput = z.infer<typeof submitGoldenBatchSchema>;

/** What the batch submission endpoint and batch_task accept: items, a glob over files, or a golden set. */
export type BatchSubmission = SubmitBatchInput | SubmitFileBatchInput | SubmitGoldenBatchInput;

export function isGoldenSubmission(input: BatchSubmission): input is SubmitGoldenBatchInput {
  return "golden_set" in input && input.golden_set !== undefined;
}

export function isFileSubmission(input: BatchSubmission): input is SubmitFileBatchInput {
  return "files" in input && input.files !== undefined;
}

/**
 * The glob of a batch over files, the same on the server and in the New batch dialog's preview:
 * lib/glob.ts (linear in the path, POSIX separators, `*` within a folder, `**` across folders,
 * dotfiles included). A glob it refuses matches nothing here; globProblem says why.
 */
export function fileGlobMatcher(glob: string): (path: string) => boolean {
  try {
    return compileGlob(glob);
  } catch (err) {
    if (err instanceof GlobError) return () => false;
    throw err;
  }
}

/** Why a glob is refused (its syntax), or null. */
export function globProblem(glob: string): string | null {
  try {
    compileGlob(glob);
    return null;
  } catch (err) {
    if (err instanceof GlobError) return err.message;
    throw err;
  }
}

/** A glob matching exactly these paths (glob syntax escaped), for picking files one by one. */
export function globForPaths(paths: readonly string[]): string {
  const escaped = paths.map((p) => p.replace(/[\\*?[\]{}(),!+@|^$]/g, (c) => `\\${c}`));
  return escaped.length === 1 ? escaped[0]! : `{${escaped.join(",")}}`;
}
