import { and, asc, eq, gt, inArray } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatchItems } from "@/server/db/schema";
import type { ItemStatus } from "@/server/db/schema/batches";
import type { CompatBatch } from "./batches";
import { completionId, messageId, requestId } from "./ids";

/**
 * The result files of a compatible batch, generated from its items (never stored), so a retry
 * of a failed item in the panel changes the next download. Read in position order a page at a
 * time: bounded memory however many items.
 *   OpenAI output file: the succeeded requests as chat.completion responses.
 *   OpenAI error file:  failed requests (status 500 with the provider's error body), and the
 *                       requests a cancel or the completion window ended (batch_cancelled /
 *                       batch_expired).
 *   Anthropic results:  every request, result type succeeded | errored | canceled | expired.
 */

const PAGE_ROWS = 500;

interface ItemOut {
  id: string;
  itemKey: string;
  status: ItemStatus;
  result: string | null;
  error: string | null;
  model: string | null;
  stopReason: string | null;
  inputTokens: number;
  outputTokens: number;
  finishedAt: Date | null;
}

async function* itemsOf(db: DbOrTx, batchId: string, statuses: ItemStatus[]): AsyncGenerator<ItemOut[]> {
  const i = subagentBatchItems;
  let after = 0;
  for (;;) {
    const rows = await db
      .select({
        id: i.id,
        position: i.position,
        itemKey: i.itemKey,
        status: i.status,
        result: i.result,
        error: i.error,
        model: i.model,
        stopReason: i.stopReason,
        inputTokens: i.inputTokens,
        outputTokens: i.outputTokens,
        finishedAt: i.finishedAt,
      })
      .from(i)
      .where(and(eq(i.batchId, batchId), gt(i.position, after), inArray(i.status, statuses)))
      .orderBy(asc(i.position))
      .limit(PAGE_ROWS);
    if (rows.length > 0)
      yield rows.map((r) => ({ ...r, inputTokens: Number(r.inputTokens), outputTokens: Number(r.outputTokens) }));
    if (rows.length < PAGE_ROWS) return;
    after = rows[rows.length - 1]!.position;
  }
}

const unix = (d: Date | null) => Math.floor((d ?? new Date()).getTime() / 1000);

const FINISH_REASONS: Record<string, string> = {
  stop: "stop",
  length: "length",
  "content-filter": "content_filter",
  "tool-calls": "tool_calls",
};
const STOP_REASONS: Record<string, string> = { stop: "end_turn", length: "max_tokens", "tool-calls": "tool_use" };

export function openAiOutputLine(it: ItemOut): object {
  return {
    id: `batch_req_${it.id.replace(/-/g, "")}`,
    custom_id: it.itemKey,
    response: {
      status_code: 200,
      request_id: requestId(it.id),
      body: {
        id: completionId(it.id),
        object: "chat.completion",
        created: unix(it.finishedAt),
        model: it.model ?? "unknown",
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: it.result ?? "", refusal: null },
            logprobs: null,
            finish_reason: FINISH_REASONS[it.stopReason ?? ""] ?? "stop",
          },
        ],
        usage: {
          prompt_tokens: it.inputTokens,
          completion_tokens: it.outputTokens,
          total_tokens: it.inputTokens + it.outputTokens,
        },
      },
    },
    error: null,
  };
}

export function openAiErrorLine(it: ItemOut, expired: boolean): object {
  const id = `batch_req_${it.id.replace(/-/g, "")}`;
  if (it.status === "cancelled")
    return {
      id,
      custom_id: it.itemKey,
      response: null,
      error: expired
        ? { code: "batch_expired", message: "This request could not be executed before the completion window expired." }
        : { code: "batch_cancelled", message: "This request was cancelled before it finished." },
    };
  return {
    id,
    custom_id: it.itemKey,
    response: {
      status_code: 500,
      request_id: requestId(it.id),
      body: { error: { message: it.error ?? "the request failed", type: "server_error", param: null, code: null } },
    },
    error: null,
  };
}

export function anthropicResultLine(it: ItemOut, expired: boolean): object {
  if (it.status === "succeeded")
    return {
      custom_id: it.itemKey,
      result: {
        type: "succeeded",
        message: {
          id: messageId(it.id),
          type: "message",
          role: "assistant",
          model: it.model ?? "unknown",
          content: [{ type: "text", text: it.result ?? "", citations: null }],
          stop_reason: STOP_REASONS[it.stopReason ?? ""] ?? "end_turn",
          stop_sequence: null,
          usage: {
            input_tokens: it.inputTokens,
            output_tokens: it.outputTokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            server_tool_use: null,
            service_tier: "batch",
          },
        },
      },
    };
  if (it.status === "failed")
    return {
      custom_id: it.itemKey,
      result: {
        type: "errored",
        error: { type: "error", error: { type: "api_error", message: it.error ?? "the request failed" }, request_id: null },
      },
    };
  return { custom_id: it.itemKey, result: { type: expired ? "expired" : "canceled" } };
}

export type ResultFile = "output" | "errors" | "results";

const STATUSES: Record<ResultFile, ItemStatus[]> = {
  output: ["succeeded"],
  errors: ["failed", "cancelled"],
  results: ["succeeded", "failed", "cancelled"],
};

/** One result file as JSONL bytes, a page of lines per chunk. */
export async function* resultFileChunks(db: DbOrTx, current: CompatBatch, file: ResultFile): AsyncGenerator<Buffer> {
  const batchId = current.batch?.id;
  if (!batchId) return;
  const expired = current.compat.expiredAt !== null;
  for await (const page of itemsOf(db, batchId, STATUSES[file])) {
    const lines = page.map((it) =>
      JSON.stringify(
        file === "output"
          ? openAiOutputLine(it)
          : file === "errors"
            ? openAiErrorLine(it, expired)
            : anthropicResultLine(it, expired),
      ),
    );
    yield Buffer.from(`${lines.join("\n")}\n`, "utf8");
  }
}

/** A generated file's size (generated once to count; used by the file object's `bytes`). */
export async function resultFileBytes(db: DbOrTx, current: CompatBatch, file: ResultFile): Promise<number> {
  let bytes = 0;
  for await (const chunk of resultFileChunks(db, current, file)) bytes += chunk.length;
  return bytes;
}
