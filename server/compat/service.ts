import { and, eq } from "drizzle-orm";
import { z } from "zod";
import { anthropicCustomIdSchema, type openAiBatchCreateSchema } from "@/lib/api/compat";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { compatFiles } from "@/server/db/schema";
import { type CompatBatch, createCompatBatch, createFailedBatch, modelChecker, type NewRequest } from "./batches";
import { fileChunks } from "./files";
import { CompatParamError } from "./errors";
import { parseFileId } from "./ids";
import { type LineError, messageParamsSchema, normalizeMessageParams, splitLines, validateOpenAiLine } from "./requests";

/**
 * Creating compatible batches. OpenAI: every line of the uploaded file is validated before
 * anything runs; a file with bad lines makes a batch with status `failed` and `errors.data`
 * (as the provider reports it), and nothing else. Anthropic: a bad request refuses the whole
 * call with a 400 naming it (as the provider does).
 */

/** At most this many line errors are reported (the provider, too, reports a bounded list). */
export const MAX_REPORTED_ERRORS = 1_000;

export async function createOpenAiBatch(
  db: Db,
  args: { userId: string; config: FlotillaConfig; input: z.infer<typeof openAiBatchCreateSchema> },
): Promise<CompatBatch> {
  const { input, userId, config } = args;
  const parsedId = parseFileId(input.input_file_id);
  if (parsedId?.kind !== "upload")
    throw new CompatParamError("input_file_id", `input_file_id: no uploaded file ${JSON.stringify(input.input_file_id)}`);
  const checkModel = modelChecker(config);
  return db.transaction(async (tx) => {
    // Held for share so the file cannot be deleted between validating and reading it again.
    const [file] = await tx
      .select()
      .from(compatFiles)
      .where(and(eq(compatFiles.id, parsedId.id), eq(compatFiles.userId, userId)))
      .for("share");
    if (!file) throw new CompatParamError("input_file_id", `input_file_id: no uploaded file ${JSON.stringify(input.input_file_id)}`);
    const lines = async function* (db: DbOrTx) {
      const seen = new Set<string>();
      for await (const { line, text } of splitLines(fileChunks(db, file.id)))
        yield validateOpenAiLine(text, line, { endpoint: input.endpoint, seen, checkModel });
    };
    const errors: LineError[] = [];
    let total = 0;
    let firstModel: string | undefined;
    for await (const r of lines(tx)) {
      total++;
      if (r.ok) firstModel ??= r.request.model;
      else if (errors.length < MAX_REPORTED_ERRORS) errors.push(r.error);
    }
    if (total === 0) errors.push({ code: "empty_file", message: "The batch input file is empty.", param: null, line: null });
    if (total > config.compat.max_requests_per_file)
      errors.push({
        code: "too_many_requests",
        message: `The file has ${total} requests; at most compat.max_requests_per_file (${config.compat.max_requests_per_file}).`,
        param: null,
        line: null,
      });
    const common = {
      userId,
      inputFileId: file.id,
      endpoint: input.endpoint,
      completionWindow: input.completion_window,
      metadata: input.metadata ?? null,
    };
    if (errors.length > 0 || firstModel === undefined) return createFailedBatch(tx, { ...common, errors, total });
    return createCompatBatch(tx, {
      ...common,
      api: "openai",
      config,
      title: file.filename,
      total,
      firstModel,
      requests: async function* () {
        for await (const r of lines(tx)) if (r.ok) yield { customId: r.customId, request: r.request } satisfies NewRequest;
      },
    });
  });
}

const anthropicCreateSchema = z.object({ requests: z.array(z.unknown()).min(1, "at least one request is required") });

export async function createAnthropicBatch(
  db: Db,
  args: { userId: string; config: FlotillaConfig; body: unknown },
): Promise<CompatBatch> {
  const { config } = args;
  const top = anthropicCreateSchema.safeParse(args.body);
  if (!top.success) {
    const issue = top.error.issues[0]!;
    const param = issue.path.length ? issue.path.join(".") : "requests";
    throw new CompatParamError(param, `${param}: ${issue.message}`);
  }
  const max = config.compat.max_requests_per_file;
  if (top.data.requests.length > max)
    throw new CompatParamError("requests", `requests: at most compat.max_requests_per_file (${max}) requests per batch`);
  const checkModel = modelChecker(config);
  const seen = new Set<string>();
  const requests: NewRequest[] = top.data.requests.map((raw, i) => {
    const at = `requests.${i}`;
    const r = (raw ?? {}) as { custom_id?: unknown; params?: unknown };
    const id = anthropicCustomIdSchema.safeParse(r.custom_id);
    if (!id.success) throw new CompatParamError(`${at}.custom_id`, `${at}.custom_id: ${id.error.issues[0]?.message}`);
    if (seen.has(id.data)) throw new CompatParamError(`${at}.custom_id`, `${at}.custom_id: ${JSON.stringify(id.data)} is used twice`);
    seen.add(id.data);
    const params = messageParamsSchema.safeParse(r.params);
    if (!params.success) {
      const issue = params.error.issues[0]!;
      const param = [`${at}.params`, ...issue.path.map(String)].join(".");
      throw new CompatParamError(param, `${param}: ${issue.message}`);
    }
    const problem = checkModel(params.data.model);
    if (problem) throw new CompatParamError(`${at}.params.model`, `${at}.params.model: ${problem}`);
    return { customId: id.data, request: normalizeMessageParams(params.data) };
  });
  return db.transaction((tx) =>
    createCompatBatch(tx, {
      userId: args.userId,
      api: "anthropic",
      config,
      title: requests[0]!.customId,
      total: requests.length,
      firstModel: requests[0]!.request.model,
      completionWindow: "24h",
      requests: async function* () {
        yield* requests;
      },
    }),
  );
}
