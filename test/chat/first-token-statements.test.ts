import { beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import { createApiToken } from "@/server/auth/tokens";
import { createThread } from "@/server/chat/threads";
import { createDatabase, type Database } from "@/server/db/client";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, params, request, useSuiteEnv } from "./support";

/**
 * The statements a warm chat turn (bearer token, a new thread, the simulator) sends before the
 * model starts, and how many times it waits for PostgreSQL on the way: statements sent in the
 * same turn of the event loop go out together (the web's pool prepares its statements, so
 * postgres.js pipelines a connection's queries; the pool's connections run side by side), so
 * the turn waits once per turn of the loop that sent any. Each wait is a round trip, several
 * milliseconds on a loaded machine (bench/RESULTS.md, issue 44 step 6).
 */

let t: TestDatabase;
let userId: string;
let token: string;
/** Every statement the web's pool sends, with the turn of the event loop it was sent in. */
const sent: { tick: number; text: string }[] = [];
let tick = 0;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "0" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  // The web's pool (getDatabase), with a hook on every statement it sends.
  (globalThis as { __flotillaDb?: Database }).__flotillaDb = createDatabase(t.url, {
    applicationName: "flotilla-web",
    preparedStatements: true,
    debug: (_connection, query) => sent.push({ tick, text: query.replace(/\s+/g, " ").trim() }),
  });
  const user = await makeUser(t.db, "statements");
  userId = user.id;
  token = await createApiToken(t.db, { userId });
});

/** One turn in a new thread: the statements sent until the first text delta was read, then the reply drained. */
async function turn(): Promise<{ tick: number; text: string }[]> {
  const threadId = (await createThread(t.db, { userId })).id;
  sent.length = 0;
  let ticking = true;
  tick = 0;
  const next = () => {
    tick++;
    if (ticking) setImmediate(next);
  };
  setImmediate(next);
  const res = await chat(
    request(`/api/threads/${threadId}/chat`, {
      method: "POST",
      bearer: token,
      body: { message: { id: `m${Date.now()}`, role: "user", parts: [{ type: "text", text: "Say hello." }] } },
    }),
    params({ threadId }),
  );
  expect(res.status).toBe(200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let before: { tick: number; text: string }[] | undefined;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (!before && value.includes('"type":"text-delta"')) before = [...sent];
  }
  ticking = false;
  expect(before).toBeDefined();
  return before!;
}

describe("a chat turn's way to its first token", () => {
  it("waits for PostgreSQL 6 times before the model starts: the token, the thread's reads, begin, the locks, the message with its run, commit", async () => {
    // Warm: every connection of the pool has prepared the turn's statements (an unprepared one
    // is described first, and postgres.js sends nothing behind it until that answer).
    for (let i = 0; i < 12; i++) await turn();
    const statements = await turn();
    const commit = statements.findIndex((s) => s.text === "commit");
    const path = statements.slice(0, commit + 1);
    const waits = new Set(path.map((s) => s.tick)).size;
    console.log(`${path.length} statements in ${waits} waits before the model starts:\n${path.map((s) => `  [${s.tick}] ${s.text.slice(0, 140)}`).join("\n")}`);
    expect(commit).toBeGreaterThan(0);
    expect(waits).toBeLessThanOrEqual(6);
    // What follows the commit before the first chunk is sent beside the model, never waited for.
    const after = statements.slice(commit + 1).filter((s) => !s.text.startsWith('insert into "chat_stream_chunks"') && !s.text.startsWith("select pg_notify"));
    expect(after.map((s) => s.text.split(" ").slice(0, 3).join(" "))).toEqual(['update "threads" set']);
  }, 120_000);
});
