import type { UIMessageChunk } from "ai";
import { asc, eq, sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { createRun } from "@/server/agent/runs";
import { startLeadRun } from "@/server/chat/lead-run";
import { ChunkWriter, readChatStream } from "@/server/chat/streams";
import { createThread } from "@/server/chat/threads";
import { loadConfig } from "@/server/config/load";
import { createDatabase, type Database } from "@/server/db/client";
import { chatStreamChunks, chatStreams } from "@/server/db/schema";
import { resolveModel } from "@/server/models";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, useSuiteEnv } from "./support";

/**
 * The process that writes a chat stream hands its chunks to readers in the same process from
 * memory (first token without a table round trip), and still stores every chunk, in order, for
 * readers in other processes and for resume. "Another process" is a second database client.
 */

let t: TestDatabase;
let other: Database;
let userId: string;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "0" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  other = createDatabase(t.url, { max: 2, applicationName: "flotilla-other-process" });
  userId = (await makeUser(t.db, "streams")).id;
  return () => other.close();
});

async function newStream(): Promise<string> {
  const thread = await createThread(t.db, { userId });
  const [row] = await t.db.insert(chatStreams).values({ threadId: thread.id, userId, messageId: `m-${thread.id}` }).returning();
  return row!.id;
}

const delta = (i: number): UIMessageChunk => ({ type: "text-delta", id: "t", delta: `word${i} ` });

async function readAll(stream: ReadableStream<UIMessageChunk>): Promise<UIMessageChunk[]> {
  const out: UIMessageChunk[] = [];
  for await (const chunk of stream as unknown as AsyncIterable<UIMessageChunk>) out.push(chunk);
  return out;
}

async function stored(streamId: string): Promise<UIMessageChunk[]> {
  const rows = await t.db
    .select({ chunk: chatStreamChunks.chunk })
    .from(chatStreamChunks)
    .where(eq(chatStreamChunks.streamId, streamId))
    .orderBy(asc(chatStreamChunks.seq));
  return rows.map((r) => r.chunk as UIMessageChunk);
}

describe("chat streams in the writing process", () => {
  it("reach a reader in the same process while the table cannot be written, and are stored once it can", async () => {
    const streamId = await newStream();
    const writer = new ChunkWriter(t.db, streamId);
    const reader = readChatStream(t.db, { streamId }).getReader();
    // Another session holds the chunk table: every insert of the writer waits behind it.
    const blocker = await other.sql.reserve();
    await blocker`begin`;
    await blocker`lock table chat_stream_chunks in access exclusive mode`;
    try {
      writer.write(delta(0));
      writer.write(delta(1));
      expect((await reader.read()).value).toEqual(delta(0));
      expect((await reader.read()).value).toEqual(delta(1));
      // ...while the writer's insert waits for the lock (polled: under load the insert may reach
      // PostgreSQL a moment after the reader already has both chunks).
      const inserting = async () => {
        const [row] = await blocker<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
           where datname = current_database() and wait_event_type = 'Lock' and query ilike 'insert into "chat_stream_chunks"%'`;
        return row!.n;
      };
      for (let i = 0; i < 100 && (await inserting()) === 0; i++) await new Promise((r) => setTimeout(r, 50));
      expect(await inserting()).toBe(1);
    } finally {
      await blocker`rollback`;
      blocker.release();
    }
    writer.write(delta(2));
    expect((await reader.read()).value).toEqual(delta(2));
    await writer.close();
    expect((await reader.read()).done).toBe(true);
    expect(await stored(streamId)).toEqual([delta(0), delta(1), delta(2)]);
  });

  it("replays from any seq to a reader that attaches mid-stream, and follows to the end under concurrent writes", async () => {
    const streamId = await newStream();
    const writer = new ChunkWriter(t.db, streamId);
    for (let i = 0; i < 5; i++) writer.write(delta(i));
    const fromStart = readAll(readChatStream(t.db, { streamId }));
    const fromThree = readAll(readChatStream(t.db, { streamId, fromSeq: 3 }));
    const writing = (async () => {
      for (let i = 5; i < 200; i++) {
        writer.write(delta(i));
        if (i % 7 === 0) await new Promise((r) => setImmediate(r));
      }
      await writer.close();
    })();
    const all = Array.from({ length: 200 }, (_, i) => delta(i));
    expect(await fromStart).toEqual(all);
    expect(await fromThree).toEqual(all.slice(3));
    await writing;
    expect(await stored(streamId)).toEqual(all);
  });

  it("is read from the table by another process, during and after the response", async () => {
    const streamId = await newStream();
    const writer = new ChunkWriter(t.db, streamId);
    writer.write(delta(0));
    const remote = readAll(readChatStream(other.db, { streamId }));
    writer.write(delta(1));
    await writer.close();
    expect(await remote).toEqual([delta(0), delta(1)]);
    // Once finished, this process reads the stored stream too (nothing kept in memory).
    expect(await readAll(readChatStream(t.db, { streamId }))).toEqual([delta(0), delta(1)]);
  });

  it("a cancelled local reader stops without stopping the stream or other readers", async () => {
    const streamId = await newStream();
    const writer = new ChunkWriter(t.db, streamId);
    const cancelled = readChatStream(t.db, { streamId }).getReader();
    const kept = readAll(readChatStream(t.db, { streamId }));
    writer.write(delta(0));
    expect((await cancelled.read()).value).toEqual(delta(0));
    await cancelled.cancel();
    writer.write(delta(1));
    await writer.close();
    expect(await kept).toEqual([delta(0), delta(1)]);
    expect(await stored(streamId)).toEqual([delta(0), delta(1)]);
  });

  it("a new message takes over a lock whose run already ended, and is refused while the run lives", async () => {
    const config = loadConfig();
    const start = (threadId: string, id: string) =>
      startLeadRun(t.db, { config, model: resolveModel(config), userId, threadId, trigger: { kind: "user", message: { id, role: "user", parts: [{ type: "text", text: "hello" }] } } });
    const thread = await createThread(t.db, { userId });
    const run = await createRun(t.db, { userId, threadId: thread.id, kind: "lead", definition: "lead", model: "simulator", prompt: "x", status: "running" });
    const [stale] = await t.db.insert(chatStreams).values({ threadId: thread.id, userId, runId: run.id, messageId: "m-stale" }).returning();
    await expect(start(thread.id, `busy-${thread.id}`)).rejects.toMatchObject({ code: "conflict" });
    await t.db.execute(sql`update agent_runs set status = 'failed' where id = ${run.id}`);
    const started = await start(thread.id, `next-${thread.id}`);
    await started.done;
    const [old] = await t.db.select({ status: chatStreams.status }).from(chatStreams).where(eq(chatStreams.id, stale!.id));
    expect(old!.status).toBe("finished");
    const [fresh] = await t.db.select().from(chatStreams).where(eq(chatStreams.id, started.streamId));
    expect(fresh).toMatchObject({ status: "finished", runId: started.runId });
  });
});
