import { beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema } from "@/lib/api/batches";
import { exportResultsStream } from "@/server/http/export";
import { call, makeThread, makeUser, setupApiDatabase, type TestUser } from "./helpers";

/**
 * The export writes JSON lines from the driver's raw bytes. Whatever PostgreSQL stores, each
 * line must be byte for byte what JSON.stringify writes for the same values read normally.
 */

const tdb = await setupApiDatabase();
let user: TestUser;
let thread: string;

beforeAll(async () => {
  user = await makeUser(tdb, "copy");
  thread = await makeThread(tdb, user);
});

const controls = Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).join("");
const TRICKY: (string | null)[] = [
  "plain",
  "",
  null,
  controls,
  `every control: ${controls} end`,
  "vertical\u000btab and form\ffeed",
  'quotes " and "" and \\" mixed',
  "backslash \\ and \\\\ and \\v and \\n and \\N literally",
  "\\N",
  "\\",
  '"',
  "tab\there\r\nnewline",
  "unicode é ✓ 中文 😀 \u2028 \u2029 \u007f",
  `${"long ".repeat(30_000)}"quoted"\n${"ü".repeat(10_000)}`,
];

interface Expected {
  item_key: string;
  input: string;
  position: number;
  status: string;
  attempts: number;
  result: string | null;
  error: string | null;
  usage: { input_tokens: number; output_tokens: number };
}

describe("results.jsonl bytes", () => {
  it("matches JSON.stringify for every kind of stored text, in result, error, item_key and input", async () => {
    const items = TRICKY.map((_, i) => ({ item_key: `k${i} "${TRICKY[i] === null ? "" : (TRICKY[i] as string).slice(0, 40)}`, prompt: `p ${(TRICKY[i] ?? "").slice(0, 5_000)}` }));
    const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
      token: user.token,
      json: { submission_key: "tricky", items },
    });
    expect(res.status).toBe(201);
    const batchId = batchProjectionSchema.parse(await res.json()).id;
    for (const [i, value] of TRICKY.entries()) {
      const error = value === null ? null : `err:${value}`;
      await tdb.sql`
        update subagent_batch_items
           set status = ${value === null ? "failed" : "succeeded"}, result = ${value}, error = ${error},
               attempts = ${i}, input_tokens = ${i * 1_000_003}, output_tokens = ${2 ** 40 + i}
         where batch_id = ${batchId} and position = ${i + 1}`;
    }
    const rows = await tdb.sql<{ item_key: string; position: number; status: string; attempts: number; result: string | null; error: string | null; input_tokens: string; output_tokens: string; input: string }[]>`
      select item_key, position, status, attempts, result, error, input_tokens, output_tokens, input
        from subagent_batch_items where batch_id = ${batchId} order by position`;
    const expected = rows
      .map((r) => {
        const line: Expected = {
          item_key: r.item_key,
          input: r.input,
          position: r.position,
          status: r.status,
          attempts: r.attempts,
          result: r.result,
          error: r.error,
          usage: { input_tokens: Number(r.input_tokens), output_tokens: Number(r.output_tokens) },
        };
        return `${JSON.stringify(line)}\n`;
      })
      .join("");

    for (const fetchRows of [1, 5, 100]) {
      let text = "";
      const decoder = new TextDecoder();
      for await (const chunk of exportResultsStream(tdb.sql, { batchId, fetchRows }) as unknown as AsyncIterable<Uint8Array>)
        text += decoder.decode(chunk, { stream: true });
      expect(text).toBe(expected);
    }
  });
});
