import { beforeAll, describe, expect, it } from "vitest";
import { call, errorOf, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";

/**
 * A batch over files is bounded from the glob's matches as they are read, a page at a time: the
 * count and the computed prompt total refuse it before the rest of a large thread is loaded
 * (nothing is expanded or written), so a thread of many files cannot take the web process's heap.
 */

process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_ITEMS_PER_BATCH = "5";
process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_TOTAL_PROMPT_CHARS = "1000";

const tdb = await setupApiDatabase();
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  user = await makeUser(tdb, "globs");
  threadId = await makeThread(tdb, user);
  await workerAlive(tdb);
  // 2,500 empty files (empty files cost no storage): more than two pages of paths.
  await tdb.sql`
    insert into workspace_files (user_id, thread_id, path, bytes, size, sha256, content_type)
    select ${user.userId}, ${threadId}, 'many/' || lpad(n::text, 5, '0') || '.txt', ''::bytea, 0,
           'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'text/plain'
      from generate_series(1, 2500) n`;
});

const submit = (body: Record<string, unknown>) =>
  call("POST", `/api/threads/${threadId}/subagent-batches`, { token: user.token, json: { submission_key: crypto.randomUUID(), ...body } });

describe("files batches are bounded while the glob is matched", () => {
  it("refuses past max_items_per_batch at the first match beyond it, without counting the rest", async () => {
    const before = await rowCounts(tdb);
    const res = await submit({ files: "many/*.txt", prompt_template: "Read {{file}}" });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toEqual({
      code: "validation_failed",
      message: "files: the glob matches more than 5 files; at most 5 items per batch",
    });
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("refuses past max_total_prompt_chars from lengths alone (413 naming it), before expanding anything", async () => {
    const before = await rowCounts(tdb);
    // 3 × (390 + 2 × 14) characters = 1,254 > 1,000, known at the third path.
    const res = await submit({ files: "many/0000*.txt", prompt_template: `${"x".repeat(390)} {{file}} {{file}}` });
    expect(res.status).toBe(413);
    expect(await errorOf(res)).toEqual({
      code: "payload_too_large",
      message: expect.stringContaining("would total more than 1000 characters per batch (subagent_batches.max_total_prompt_chars)"),
    });
    expect(await rowCounts(tdb)).toEqual(before);
  });

  it("a glob within both bounds makes its batch, one item per file", async () => {
    const res = await submit({ files: "many/0000[1-4].txt", prompt_template: "Read {{file}}" });
    expect(res.status).toBe(201);
    expect(((await res.json()) as { total: number }).total).toBe(4);
  });
});
