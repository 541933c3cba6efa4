import { randomUUID } from "node:crypto";
import type postgres from "postgres";
import type { z } from "zod";
import { resultLineSchema } from "@/lib/api/batches";
import { type ExportArgs, exportResultsStream } from "@/server/http/export";

/** An export's arguments as a test opens it directly: a user of its own (its own slots) and the default holding time. */
export function exportArgs(batchId: string, extra: Partial<ExportArgs> = {}): ExportArgs {
  return { batchId, userId: randomUUID(), maxMs: 600_000, ...extra };
}

/** A batch's results.jsonl read through the real export stream, parsed line by line. */
export async function exportLines(sql: postgres.Sql, batchId: string, fetchRows?: number): Promise<z.infer<typeof resultLineSchema>[]> {
  const text = (await new Response(await exportResultsStream(sql, exportArgs(batchId, { fetchRows }))).text()).trimEnd();
  return text === "" ? [] : text.split("\n").map((line) => resultLineSchema.parse(JSON.parse(line)));
}
