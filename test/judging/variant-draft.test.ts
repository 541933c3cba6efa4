import { beforeAll, describe, expect, it } from "vitest";
import { type VariantDraft, variantDraftSchema } from "@/lib/api/variants";
import { call, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";

/** GET .../variant: the settings the New batch dialog prefills a variant with, owner-scoped. */

let t: TestDatabase;
let owner: TestUser;
let stranger: TestUser;
let thread: string;
let batchId: string;

const checks = [
  { name: "says_yes", type: "regex", pattern: "^yes$", flags: "i" },
  { name: "label", type: "equals", path: "/label", on_fail: "retry" },
];
const outputSchema = { type: "object", properties: { label: { type: "string" } }, required: ["label"] };

beforeAll(async () => {
  t = await setupApiDatabase();
  owner = await makeUser(t, "owner");
  stranger = await makeUser(t, "stranger");
  thread = await makeThread(t, owner);
  await workerAlive(t);
  const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
    token: owner.token,
    json: {
      submission_key: "draft-1",
      items: [{ item_key: "a", text: "one", expected: "x" }],
      prompt_template: "Label {{text}}",
      output_schema: outputSchema,
      checks,
      max_running_items: 3,
      review: { when: "sample", rate: 0.25 },
    },
  });
  expect(res.status).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
});

const draftPath = (threadId: string) => `/api/threads/${threadId}/subagent-batches/${batchId}/variant`;

describe("GET .../variant", () => {
  it("answers the batch's template, model, sub-agent, schema, checks, running limit and review policy, with the catalog's models", async () => {
    const res = await call("GET", draftPath(thread), { token: owner.token });
    expect(res.status).toBe(200);
    const draft: VariantDraft = variantDraftSchema.parse(await res.json());
    expect(draft).toEqual({
      subagent: "general",
      model: "simulator",
      prompt_template: "Label {{text}}",
      output_schema: outputSchema,
      checks,
      golden_set: null,
      max_running_items: 3,
      review: { when: "sample", rate: 0.25 },
      examples: null,
      models: expect.arrayContaining(["simulator"]),
    });
  });

  it("is 404 for another user, through their own thread or the owner's", async () => {
    const theirs = await makeThread(t, stranger);
    for (const threadId of [theirs, thread]) {
      const res = await call("GET", draftPath(threadId), { token: stranger.token });
      expect(res.status).toBe(404);
    }
  });
});
