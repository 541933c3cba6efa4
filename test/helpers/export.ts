import type postgres from "postgres";
import type { z } from "zod";
import { resultLineSchema } from "@/lib/api/batches";
import { exportResultsStream } from "@/server/http/export";

/** A batch's results.jsonl read through the real export stream, parsed line by line. */
export async function exportLines(sql: postgres.Sql, batchId: string, fetchRows?: number): Promise<z.infer<typeof resultLineSchema>[]> {
  const text = (await new Response(exportResultsStream(sql, { batchId, fetchRows })).text()).trimEnd();
  return text === "" ? [] : text.split("\n").map((line) => resultLineSchema.parse(JSON.parse(line)));
}
