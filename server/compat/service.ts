import { and, eq } from "drizzle-orm";
import type { z } from "zod";
import { anthropicCustomIdSchema, type openAiBatchCreateSchema } from "@/lib/api/compat";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { compatFiles } from "@/server/db/schema";
import { type CompatBatch, createCompatBatch, createFailedBatch, modelChecker, type NewRequest } from "./batches";
import { fileChunks } from "./files";
import { turnEvery } from "@/server/runtime/next-turn";
import { CompatParamError } from "./errors";
import { parseFileId } from "./ids";
import {
  type LineError,
  type ModelCheck,
  messageParamsSchema,
  newFileSchemas,
  normalizeMessageParams,
  splitLines,
  validateOpenAiLine,
} from "./requests";

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
    // Both passes over the file check each distinct schema once, then it is let go.
    const schemas = newFileSchemas();
    const lines = async function* (db: DbOrTx) {
      const seen = new Set<string>();
      // A chunk holds many lines, each maybe a schema with patterns to compile: other requests run in between.
      const turn = turnEvery(20);
      for await (const { line, text } of splitLines(fileChunks(db, file.id))) {
        yield validateOpenAiLine(text, line, { endpoint: input.endpoint, seen, checkModel, schemas });
        await turn();
      }
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

/** One request of an Anthropic create, validated and normalized; `at` names it (`requests.3`). */
function anthropicRequest(raw: unknown, at: string, ctx: { seen: Set<string>; checkModel: ModelCheck }): NewRequest {
  const r = (raw ?? {}) as { custom_id?: unknown; params?: unknown };
  const id = anthropicCustomIdSchema.safeParse(r.custom_id);
  if (!id.success) throw new CompatParamError(`${at}.custom_id`, `${at}.custom_id: ${id.error.issues[0]?.message}`);
  if (ctx.seen.has(id.data)) throw new CompatParamError(`${at}.custom_id`, `${at}.custom_id: ${JSON.stringify(id.data)} is used twice`);
  ctx.seen.add(id.data);
  const params = messageParamsSchema.safeParse(r.params);
  if (!params.success) {
    const issue = params.error.issues[0]!;
    const param = [`${at}.params`, ...issue.path.map(String)].join(".");
    throw new CompatParamError(param, `${param}: ${issue.message}`);
  }
  const problem = ctx.checkModel(params.data.model);
  if (problem) throw new CompatParamError(`${at}.params.model`, `${at}.params.model: ${problem}`);
  return { customId: id.data, request: normalizeMessageParams(params.data) };
}

/**
 * An Anthropic create from its `requests`, read twice from the received body (each element's
 * JSON text, one at a time, see anthropic-body.ts): once to validate every request (a bad one
 * refuses the call naming it), then, inside the transaction, to write them. Memory holds one
 * request and the custom ids, never the body.
 */
export async function createAnthropicBatch(
  db: Db,
  args: { userId: string; config: FlotillaConfig; requests: () => AsyncIterable<string> },
): Promise<CompatBatch> {
  const { config } = args;
  const max = config.compat.max_requests_per_file;
  const checkModel = modelChecker(config);
  const validated = async function* () {
    const seen = new Set<string>();
    let index = 0;
    for await (const text of args.requests()) {
      if (index === max)
        throw new CompatParamError("requests", `requests: at most compat.max_requests_per_file (${max}) requests per batch`);
      yield anthropicRequest(JSON.parse(text), `requests.${index}`, { seen, checkModel });
      index++;
    }
    if (index === 0) throw new CompatParamError("requests", "requests: at least one request is required");
  };
  let total = 0;
  let first: NewRequest | undefined;
  for await (const request of validated()) {
    first ??= request;
    total++;
  }
  return db.transaction((tx) =>
    createCompatBatch(tx, {
      userId: args.userId,
      api: "anthropic",
      config,
      title: first!.customId,
      total,
      firstModel: first!.request.model,
      completionWindow: "24h",
      requests: validated,
    }),
  );
}
