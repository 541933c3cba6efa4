import type { UIMessageChunk } from "ai";
import { and, asc, eq, gte, lt, sql } from "drizzle-orm";
import { type Db, type DbOrTx, driverOf } from "@/server/db/client";
import { storable } from "@/server/db/storable";
import { agentRuns, chatStreamChunks, chatStreams } from "@/server/db/schema";
import { log } from "@/server/log";

/**
 * Resumable chat streams through PostgreSQL: the process that runs a lead response appends
 * its UI message chunks to `chat_stream_chunks` and notifies; any web process replays them to
 * a client from the first chunk and follows new ones until the stream is finished. No state
 * lives in one process, so a reload may land on another web process.
 */

/** Notifications carry `chunks:<stream id>` (new chunks or finished) or `stop:<run id>` (Stop from another process). */
export const CHAT_STREAM_CHANNEL = "flotilla_chat_streams";

/** Readers poll at this interval too: a lost notification costs at most this much latency. */
const POLL_MS = 1_000;
const READ_BATCH = 500;
/** Finished streams' chunks are kept this long (a reader that attached late still drains them), then pruned. */
const KEEP_FINISHED_MS = 60 * 60 * 1000;

type Listener = (payload: string) => void;

interface Hub {
  listeners: Set<Listener>;
  ready: Promise<void>;
}

// One LISTEN connection per database client (a test may hold two "processes" with two clients).
const hubs = new WeakMap<object, Hub>();

function hubFor(db: Db): Hub {
  const client = driverOf(db);
  let hub = hubs.get(client);
  if (!hub) {
    const listeners = new Set<Listener>();
    const ready = client
      .listen(CHAT_STREAM_CHANNEL, (payload) => {
        for (const l of listeners) l(payload);
      })
      .then(() => undefined)
      .catch((err) => {
        // Polling still delivers everything; only latency suffers.
        log.warn({ err }, "chat stream LISTEN failed; falling back to polling");
      });
    hub = { listeners, ready };
    hubs.set(client, hub);
  }
  return hub;
}

/** Subscribes to the chat stream channel of this database client; returns the unsubscribe function. */
export async function onChatStreamEvent(db: Db, listener: Listener): Promise<() => void> {
  const hub = hubFor(db);
  hub.listeners.add(listener);
  await hub.ready;
  return () => hub.listeners.delete(listener);
}

export async function notifyChatStream(db: DbOrTx, payload: string): Promise<void> {
  await db.execute(sql`select pg_notify(${CHAT_STREAM_CHANNEL}, ${payload})`);
}

/**
 * An active stream counts as abandoned when its run is final (the process died or recovery
 * ran) — for `graceSeconds` at least, when given — or when no run was attached a minute after
 * the lock was taken (the starter crashed). A live response's run turns final a moment before
 * its reply is stored and its stream closes: a caller that is not a person's new message (the
 * queue of a busy thread) waits out that moment with a grace instead of taking the lock in it.
 */
const abandoned = (graceSeconds: number) => sql`(
  (${chatStreams.runId} is not null and exists (
     select 1 from ${agentRuns} r where r.id = ${chatStreams.runId} and r.status not in ('pending', 'running')
        and (${graceSeconds} = 0 or coalesce(r.finished_at, '-infinity') < now() - make_interval(secs => ${graceSeconds}))))
  or (${chatStreams.runId} is null and ${chatStreams.createdAt} < now() - interval '1 minute'))`;

/** Finishes abandoned active streams (all threads, or one) so their lock is released and readers end. */
export async function closeAbandonedStreams(db: DbOrTx, input: { threadId?: string; graceSeconds?: number } = {}): Promise<number> {
  const rows = await db
    .update(chatStreams)
    .set({ status: "finished", finishedAt: sql`now()` })
    .where(
      and(
        eq(chatStreams.status, "active"),
        input.threadId ? eq(chatStreams.threadId, input.threadId) : undefined,
        abandoned(input.graceSeconds ?? 0),
      ),
    )
    .returning({ id: chatStreams.id });
  for (const r of rows) await notifyChatStream(db, `chunks:${r.id}`);
  return rows.length;
}

/** Drops streams finished long ago (their messages are stored; chunks were only for replay). */
export async function pruneFinishedStreams(db: DbOrTx): Promise<void> {
  await db
    .delete(chatStreams)
    .where(and(eq(chatStreams.status, "finished"), lt(chatStreams.finishedAt, new Date(Date.now() - KEEP_FINISHED_MS))));
}

/** The streams this process (this database client) is writing, while they are active. */
const localWriters = new WeakMap<object, Map<string, ChunkWriter>>();

function writersOf(db: Db): Map<string, ChunkWriter> {
  const client = driverOf(db);
  let writers = localWriters.get(client);
  if (!writers) {
    writers = new Map();
    localWriters.set(client, writers);
  }
  return writers;
}

/**
 * Appends the chunks of one stream in order. Chunks are buffered and written in one insert
 * per flush (one notification each), so a fast model does not cost one round trip per token.
 * While the stream is active, readers in this process follow it in memory (every chunk so far
 * is kept here until close): the first token reaches the request that started the response
 * without waiting for its insert, the notification and a read back (bench/chat: that round
 * trip was most of the route's first-token overhead). Readers elsewhere read the table.
 */
export class ChunkWriter {
  private seq = 0;
  private buffer: UIMessageChunk[] = [];
  private flushing: Promise<void> | null = null;
  /** Every chunk written, by seq, for readers in this process. */
  readonly written: UIMessageChunk[] = [];
  /** Set once the stream is finished (after its last chunk is stored). */
  finished = false;
  private readonly followers = new Set<() => void>();

  constructor(
    private readonly db: Db,
    readonly streamId: string,
  ) {
    writersOf(db).set(streamId, this);
  }

  write(chunk: UIMessageChunk): void {
    this.written.push(chunk);
    this.buffer.push(chunk);
    this.flushing ??= this.drain();
    this.wakeFollowers();
  }

  /** Calls `wake` after each new chunk and at the end; returns the unsubscribe function. */
  follow(wake: () => void): () => void {
    this.followers.add(wake);
    return () => this.followers.delete(wake);
  }

  private wakeFollowers(): void {
    for (const wake of this.followers) wake();
  }

  private async drain(): Promise<void> {
    try {
      while (this.buffer.length) {
        const batch = this.buffer;
        this.buffer = [];
        const first = this.seq;
        this.seq += batch.length;
        await this.db
          .insert(chatStreamChunks)
          .values(batch.map((chunk, i) => ({ streamId: this.streamId, seq: first + i, chunk: storable(chunk) })));
        await notifyChatStream(this.db, `chunks:${this.streamId}`);
      }
    } catch (err) {
      log.error({ err, stream_id: this.streamId }, "could not store chat stream chunks");
    } finally {
      this.flushing = null;
    }
  }

  /** Writes what is buffered, then marks the stream finished (releases the thread's lock). */
  async close(): Promise<void> {
    try {
      while (this.flushing) await this.flushing;
      await this.db
        .update(chatStreams)
        .set({ status: "finished", finishedAt: sql`now()` })
        .where(and(eq(chatStreams.id, this.streamId), eq(chatStreams.status, "active")));
      await notifyChatStream(this.db, `chunks:${this.streamId}`);
    } finally {
      this.finished = true;
      writersOf(this.db).delete(this.streamId);
      this.wakeFollowers();
    }
  }
}

/** Follows a stream this process writes, from memory. */
function followLocal(writer: ChunkWriter, fromSeq: number): ReadableStream<UIMessageChunk> {
  let cursor = fromSeq;
  let cancelled = false;
  let wake: (() => void) | null = null;
  const unfollow = writer.follow(() => wake?.());
  return new ReadableStream<UIMessageChunk>({
    async pull(controller) {
      while (cursor >= writer.written.length && !writer.finished && !cancelled) await new Promise<void>((resolve) => (wake = resolve));
      wake = null;
      if (cancelled) return;
      if (cursor < writer.written.length) {
        for (; cursor < writer.written.length; cursor++) controller.enqueue(writer.written[cursor]!);
        return;
      }
      unfollow();
      controller.close();
    },
    cancel() {
      cancelled = true;
      unfollow();
      wake?.();
    },
  });
}

/** The active stream of a thread, if any (callers have checked ownership). */
export async function activeStreamOf(db: DbOrTx, input: { threadId: string }) {
  const [row] = await db
    .select()
    .from(chatStreams)
    .where(and(eq(chatStreams.threadId, input.threadId), eq(chatStreams.status, "active")))
    .limit(1);
  return row;
}

/**
 * Replays a stream from `fromSeq` and follows it until it is finished and drained. Cancelling
 * the returned stream only stops this reader, never the response.
 */
export function readChatStream(db: Db, input: { streamId: string; fromSeq?: number }): ReadableStream<UIMessageChunk> {
  const local = writersOf(db).get(input.streamId);
  if (local) return followLocal(local, input.fromSeq ?? 0);
  let cursor = input.fromSeq ?? 0;
  let cancelled = false;
  let wake: (() => void) | null = null;
  let unsubscribe: (() => void) | null = null;
  const sleep = () =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(done, POLL_MS);
      function done() {
        clearTimeout(timer);
        wake = null;
        resolve();
      }
      wake = done;
    });

  return new ReadableStream<UIMessageChunk>({
    async start() {
      unsubscribe = await onChatStreamEvent(db, (payload) => {
        if (payload === `chunks:${input.streamId}`) wake?.();
      });
    },
    async pull(controller) {
      while (!cancelled) {
        // Status first: the writer finishes only after its last chunk, so "finished" read
        // before the chunks means the chunk query sees all of them.
        const [stream] = await db
          .select({ status: chatStreams.status })
          .from(chatStreams)
          .where(eq(chatStreams.id, input.streamId));
        const rows = await db
          .select({ seq: chatStreamChunks.seq, chunk: chatStreamChunks.chunk })
          .from(chatStreamChunks)
          .where(and(eq(chatStreamChunks.streamId, input.streamId), gte(chatStreamChunks.seq, cursor)))
          .orderBy(asc(chatStreamChunks.seq))
          .limit(READ_BATCH);
        if (rows.length) {
          for (const r of rows) controller.enqueue(r.chunk as UIMessageChunk);
          cursor = rows[rows.length - 1]!.seq + 1;
          return;
        }
        if (!stream || stream.status === "finished") {
          unsubscribe?.();
          controller.close();
          return;
        }
        await sleep();
      }
    },
    cancel() {
      cancelled = true;
      wake?.();
      unsubscribe?.();
    },
  });
}
