import type { SubmitBatchInput } from "@/lib/api/batches";
import { FILE_PLACEHOLDER, type SubmitFileBatchInput } from "@/lib/api/files";
import type { FlotillaConfig } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { matchFiles, type WorkspaceScope } from "./files";

/** An item_key is at most this long (the batch engine's rule); longer paths cannot key an item. */
const MAX_ITEM_KEY_CHARS = 200;

/**
 * A batch over files as ordinary items: one per file matching the glob, in path order, keyed by
 * the path, with {{file}} in the template replaced by it. 400 naming the glob when nothing
 * matches. The sub-agent reads the file itself (the `workspace` group the batch adds), so the
 * prompt carries the path, never the bytes.
 */
export async function expandFileSubmission(
  db: DbOrTx,
  scope: WorkspaceScope & { input: SubmitFileBatchInput; config: FlotillaConfig },
): Promise<SubmitBatchInput> {
  const { files: glob, prompt_template: template, ...rest } = scope.input;
  const paths = await matchFiles(db, { ...scope, glob });
  if (paths.length === 0)
    throw new AppError("validation_failed", `files: the glob ${JSON.stringify(glob)} matches no file in this thread's workspace`);
  const max = scope.config.subagent_batches.max_items_per_batch;
  if (paths.length > max)
    throw new AppError(
      "validation_failed",
      `files: the glob ${JSON.stringify(glob)} matches ${paths.length} files; at most ${max} items per batch`,
    );
  const long = paths.find((p) => p.length > MAX_ITEM_KEY_CHARS);
  if (long)
    throw new AppError(
      "validation_failed",
      `files: ${JSON.stringify(long)} is longer than the ${MAX_ITEM_KEY_CHARS} characters an item_key may have`,
    );
  return { ...rest, items: paths.map((path) => ({ item_key: path, prompt: template.split(FILE_PLACEHOLDER).join(path) })) };
}
