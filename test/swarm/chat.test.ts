import { eq } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import type { SwarmLiveData, SwarmResult } from "@/lib/api/swarm";
import { loadMessages } from "@/server/chat/messages";
import { createThread } from "@/server/chat/threads";
import { agentRuns, runEvents } from "@/server/db/schema";
import { makeUser, params, readUIChunks, request, sessionCookie, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/** The whole path: the lead (simulator) calls agent_swarm from a `swarm:` line in the chat. */

let t: TestDatabase;
let user: { id: string; email: string; password: string };
let cookie: string;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "20" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  user = await makeUser(t.db, "swarm");
  cookie = await sessionCookie(user);
});

describe("agent_swarm from the chat", () => {
  it("streams live data-swarm parts, returns the ordered result to the lead and persists both", async () => {
    const thread = await createThread(t.db, { userId: user.id });
    const text = "swarm: Summarize {{item}} | alpha [[sleep:300]]; beta [[sleep:10]]; gamma [[sleep:150]]";
    const res = await chat(
      request(`/api/threads/${thread.id}/chat`, {
        method: "POST",
        cookie,
        body: { message: { id: "u-swarm-1", role: "user", parts: [{ type: "text", text }] } },
      }),
      params({ threadId: thread.id }),
    );
    expect(res.status).toBe(200);
    const chunks = await readUIChunks(res);

    const call = chunks.find((c) => c.type === "tool-input-available" && c.toolName === "agent_swarm") as {
      toolCallId: string;
      input: unknown;
    };
    expect(call.input).toEqual({
      profile: "general",
      prompt_template: "Summarize {{item}}",
      items: ["alpha [[sleep:300]]", "beta [[sleep:10]]", "gamma [[sleep:150]]"],
    });
    const output = (chunks.find((c) => c.type === "tool-output-available" && c.toolCallId === call.toolCallId) as { output: SwarmResult })
      .output;
    expect(output.aggregate).toMatchObject({ status: "completed", counts: { total: 3, completed: 3 } });
    expect(output.items.map((r) => r.item_id)).toEqual(["item-1", "item-2", "item-3"]);

    const live = chunks.filter((c) => c.type === "data-swarm") as Array<{ id: string; data: SwarmLiveData }>;
    expect(live.length).toBeGreaterThan(2);
    expect(live.every((p) => p.id === call.toolCallId)).toBe(true);
    expect(live.some((p) => p.data.aggregate.status === "running")).toBe(true);
    expect(live.at(-1)!.data.aggregate.status).toBe("completed");

    // The lead read the compact text projection (toModelOutput), then answered.
    const answer = chunks
      .filter((c) => c.type === "text-delta")
      .map((c) => c.delta as string)
      .join("");
    expect(answer).toContain("The swarm finished: 3 of 3 items completed.");

    // Children are swarm_child runs of the lead run; trace events sit on the lead run.
    const lead = (chunks[0] as { messageMetadata: { runId: string } }).messageMetadata.runId;
    const children = await t.db.select().from(agentRuns).where(eq(agentRuns.parentRunId, lead));
    expect(children.map((c) => c.kind)).toEqual(["swarm_child", "swarm_child", "swarm_child"]);
    const events = await t.db.select().from(runEvents).where(eq(runEvents.runId, lead));
    expect(events.some((e) => e.type === "swarm.swarm_completed")).toBe(true);

    // After reload the message carries the tool result and the final live part (trace).
    const stored = await loadMessages(t.db, { threadId: thread.id });
    const parts = stored.at(-1)!.parts as Array<{ type: string; id?: string; state?: string; output?: SwarmResult; data?: SwarmLiveData }>;
    const toolPart = parts.find((p) => p.type === "tool-agent_swarm")!;
    expect(toolPart.state).toBe("output-available");
    expect(toolPart.output?.items.map((r) => r.status)).toEqual(["completed", "completed", "completed"]);
    const dataParts = parts.filter((p) => p.type === "data-swarm");
    expect(dataParts).toHaveLength(1); // one part per tool call, replaced in place while live
    expect(dataParts[0].data?.trace.length).toBeGreaterThan(5);
  });
});
