import { createHash, randomUUID } from "node:crypto";
import { createUIMessageStream, type ProviderMetadata } from "ai";
import { and, desc, eq, sql } from "drizzle-orm";
import { type BusyPolicy, THREAD_BUSY_MESSAGE } from "@/lib/api/chat";
import type { FlotillaConfig } from "@/lib/config";
import { denyLeadApprovals } from "@/server/agent/chat-approvals";
import { type LeadResponseOptions, leadRunRow, startLeadResponse } from "@/server/agent/lead";
import { batchToolFacts } from "@/server/agent/tools/batch";
import { runValues, stopRunTree } from "@/server/agent/runs";
import type { Db, DbOrTx } from "@/server/db/client";
import { agentRuns, chatStreams, threads, toolApprovals } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { log } from "@/server/log";
import { stripDirectives } from "@/server/models/simulator";
import type { ResolvedModel } from "@/server/models/types";
import { abortLiveRun } from "@/server/runtime/run-registry";
import type { ChatMessage, ChatMessageMetadata } from "@/lib/api/chat";
import {
  enqueueMessage,
  hasQueuedMessages,
  insertMessage,
  loadMessages,
  lockThreadQueue,
  queuedIn,
  queueHead,
  saveMessage,
  threadsWithQueuedMessages,
  unqueueMessage,
} from "./messages";
import { refuseUnattended } from "./unattended";
import { ChunkWriter, activeStreamOf, closeAbandonedStreams, notifyChatStream, onChatStreamEvent, pruneFinishedStreams } from "./streams";
import { DERIVED_TITLE_MAX, getThreadForUser, shortTitle, touchThread } from "./threads";

/**
 * What starts a lead response: a user message (stored, shown in the thread) or a system
 * trigger (e.g. background children settled): its text goes to the model as the last turn but
 * is not stored, and its metadata is merged into the stored reply; its providerMetadata
 * (model-facts' notice) rides on the text part. A system trigger is a run nobody typed
 * (unattended.ts): `refused` words the notice stored instead when it may not call the model.
 */
export type LeadTrigger =
  | { kind: "user"; message: ChatMessage }
  | {
      kind: "system";
      text: string;
      metadata?: Record<string, unknown>;
      providerMetadata?: ProviderMetadata;
      refused?: (why: string) => string;
    }
  /** The history's last message is the lead's reply that ended on approval requests, now decided: it goes on. */
  | { kind: "continue" };

export interface StartedLeadRun {
  /** The chat_streams row: read it with readChatStream (any web process). */
  streamId: string;
  /** Null when a notice was stored instead of a response (unattended.ts): no model was called. */
  runId: string | null;
  /** The id of the assistant message being built (stored under it when the response ends). */
  messageId: string;
  /**
   * Settles once the reply is stored, the stream is finished and the thread's next queued
   * message (if any) has been started: all the run's own database work, so a process may close
   * its pool after it. Never rejects.
   */
  done: Promise<void>;
}

interface Lead {
  config: FlotillaConfig;
  model: ResolvedModel;
}

/**
 * A response's run turns final a moment before its reply is stored and its stream closes: a
 * lock whose run ended less than this long ago is still its response's, never taken over (the
 * next response would miss the reply in its history). Recovery at start closes them at once.
 */
const FINISHING_GRACE_SECONDS = 10;
/** How long an interrupting message waits for the running response to stop before it queues. */
const INTERRUPT_WAIT_MS = 20_000;
/** Threads one sweep starts at most (the rest wait for the next sweep). */
const SWEEP_LIMIT = 100;

const newMessageId = () => `msg_${randomUUID().replace(/-/g, "")}`;

/** The reply to a queued message has an id derived from it: whoever starts it, the interrupting request finds its stream. */
export function replyIdFor(userMessageId: string): string {
  return `msg_${createHash("sha256").update(`reply:${userMessageId}`).digest("hex").slice(0, 32)}`;
}

/** The thread's title from its first message, without the simulator's test directives (empty keeps the default). */
function titleFrom(message: ChatMessage, model: ResolvedModel): string {
  const text = message.parts.map((p) => (p.type === "text" ? p.text : "")).join(" ");
  return shortTitle(model.simulator ? stripDirectives(text) : text, DERIVED_TITLE_MAX);
}

function responseText(message: ChatMessage): string {
  return message.parts
    .map((p) => (p.type === "text" ? p.text : ""))
    .join("")
    .trim();
}

/**
 * Takes the thread's lock: one active stream row per thread (partial unique index). A lock
 * left by a dead process is released and taken again (looked for only when the lock is held,
 * so a free thread costs one statement). Runs in the caller's transaction with the message's
 * insert, so a refusal writes nothing. Undefined while a response runs, and while the lead's
 * last reply waits for a person's decision on its calls (lead rows in tool_approvals no
 * continuation has carried yet): only that continuation (`continuation`) takes the thread then.
 * `unlessQueued` also leaves it while messages wait in the thread's queue (in the same
 * statement: one round trip less on a new message's way to the model).
 */
export async function tryLockThread(
  tx: DbOrTx,
  input: { threadId: string; userId: string; messageId: string; continuation?: boolean; unlessQueued?: boolean },
): Promise<string | undefined> {
  const take = async () =>
    (
      await tx.execute<{ id: string }>(sql`
        insert into ${chatStreams} (thread_id, user_id, message_id)
        select ${input.threadId}, ${input.userId}, ${input.messageId}
         where (${input.continuation === true} or not exists (
           select 1 from ${toolApprovals} a where a.thread_id = ${input.threadId} and a.kind = 'lead' and a.continued_at is null))
           and (${input.unlessQueued !== true} or not ${queuedIn(input.threadId)})
        on conflict (thread_id) where status = 'active' do nothing
        returning id`)
    )[0]?.id;
  return (
    (await take()) ??
    ((await closeAbandonedStreams(tx, { threadId: input.threadId, graceSeconds: FINISHING_GRACE_SECONDS })) > 0 ? await take() : undefined)
  );
}

/** Sets the stream's run (its lock then lasts as long as the run, abandonedStreams). */
async function attachRun(tx: DbOrTx, input: { streamId: string; runId: string }): Promise<void> {
  await tx.update(chatStreams).set({ runId: input.runId }).where(eq(chatStreams.id, input.streamId));
}

/**
 * The lead run of a stream whose lock the transaction just took, inserted and attached to the
 * stream in one statement (the row before its reference). Returns the run's id.
 */
async function createLeadRun(tx: DbOrTx, input: { streamId: string; row: ReturnType<typeof leadRunRow> }): Promise<string> {
  const runId = randomUUID();
  const run = tx.$with("run").as(tx.insert(agentRuns).values(runValues({ id: runId, ...input.row })).returning({ id: agentRuns.id }));
  await tx
    .with(run)
    .update(chatStreams)
    .set({ runId: sql`(select id from ${run})` })
    .where(eq(chatStreams.id, input.streamId));
  return runId;
}

/**
 * Starts a lead response in a thread with no queue, refusing (409) while one runs: system
 * triggers and callers that decide nothing about busy threads. Checks ownership, takes the
 * thread's lock, stores the user message, and runs the response in this process (runLocked).
 */
export async function startLeadRun(
  db: Db,
  input: Lead & {
    userId: string;
    threadId: string;
    trigger: LeadTrigger;
    /** The reply's id when the caller derives it (a wake-up's: a repeated run overwrites, never adds). */
    messageId?: string;
    /** Bounds the response (a wake-up's run nobody watches). */
    signal?: AbortSignal;
  },
): Promise<StartedLeadRun> {
  const { userId, trigger } = input;
  // In parallel: the history is used only once the ownership check has passed.
  const [thread, history] = await Promise.all([
    getThreadForUser(db, { userId, threadId: input.threadId }),
    loadMessages(db, { threadId: input.threadId }),
  ]);
  const messageId = input.messageId ?? newMessageId();
  const streamId = await db.transaction(async (tx) => {
    const id = await tryLockThread(tx, { threadId: thread.id, userId, messageId });
    if (!id) throw new AppError("conflict", THREAD_BUSY_MESSAGE);
    if (trigger.kind === "user") await insertMessage(tx, { threadId: thread.id, message: trigger.message });
    return id;
  });
  return runLocked(db, { ...input, threadId: thread.id, history, streamId, messageId, unattended: trigger.kind === "system" });
}

/** What a person's message to a thread did: started a response (stream it), or waits its turn. */
export type PostedMessage = { kind: "started"; streamId: string } | { kind: "queued"; position: number };

/**
 * What a message to a busy thread does: `?busy=` (`requested`) picks any policy, except under a
 * configured `reject`, which a request cannot loosen into queueing or interrupting.
 */
export function busyPolicyFor(configured: BusyPolicy, requested: BusyPolicy | undefined): BusyPolicy {
  return configured === "reject" ? "reject" : (requested ?? configured);
}

/**
 * A person's message to a thread (the chat route). An idle thread answers it at once. A busy
 * one (a response runs, or messages already wait) follows the busy policy (busyPolicyFor):
 * `reject` refuses (409, nothing stored); `enqueue` stores it queued and answers it in order
 * after the responses before it; `interrupt` stops the running response as Stop does and
 * answers it next. A thread with chat.max_queued_messages waiting refuses one more (429
 * queue_full, nothing stored).
 */
export async function postUserMessage(
  db: Db,
  input: Lead & { userId: string; threadId: string; message: ChatMessage; requested?: BusyPolicy },
): Promise<PostedMessage> {
  const { userId, message, config } = input;
  const policy = busyPolicyFor(config.chat.busy_policy, input.requested);
  // Read beside the thread's reads and the message's transaction, not after them on the first
  // token's path; owner-scoped, and unused when the message waits or is refused.
  const batchFacts = batchToolFacts(db, config, { userId, threadId: input.threadId });
  const [thread, history] = await Promise.all([
    getThreadForUser(db, { userId, threadId: input.threadId }),
    loadMessages(db, { threadId: input.threadId }),
  ]);
  const threadId = thread.id;
  const messageId = newMessageId();
  // An interrupting message is the person's answer to calls still waiting for them: denied.
  if (policy === "interrupt") await denyLeadApprovals(db, { threadId, reason: "interrupted by a new message" });
  const taken = await db.transaction(async (tx) => {
    // Sent together, run in this order by the backend (one connection): the queue's lock is
    // held before the thread's lock is tried. Messages already waiting go first; an
    // interrupting one goes ahead of them.
    const [, streamId] = await Promise.all([
      lockThreadQueue(tx, threadId),
      tryLockThread(tx, { threadId, userId, messageId, unlessQueued: policy !== "interrupt" }),
    ]);
    if (streamId) {
      // The message, the run and the stream's run_id commit together, sent together: a crash
      // after the commit leaves a running run of a dead instance, which recovery ends (and with
      // it the stream's lock); one round trip before the first token instead of three.
      const [, runId] = await Promise.all([
        insertMessage(tx, { threadId, message }),
        createLeadRun(tx, { streamId, row: leadRunRow({ userId, threadId, model: input.model, messages: [message] }) }),
      ]);
      return { kind: "locked" as const, streamId, runId };
    }
    const waiting = policy !== "interrupt" && (await hasQueuedMessages(tx, threadId));
    if (policy === "reject") throw new AppError("conflict", THREAD_BUSY_MESSAGE);
    const position = await enqueueMessage(tx, {
      threadId,
      message,
      interrupt: policy === "interrupt",
      max: config.chat.max_queued_messages,
    });
    return { kind: "queued" as const, position, waiting };
  });
  if (taken.kind === "locked") {
    const run = await runLocked(db, {
      ...input,
      threadId,
      history,
      trigger: { kind: "user", message },
      streamId: taken.streamId,
      runId: taken.runId,
      messageId,
      unattended: false,
      batchFacts,
    });
    return { kind: "started", streamId: run.streamId };
  }
  if (policy === "interrupt") return interrupt(db, { ...input, threadId });
  // A queue can outlive its thread's response by a moment (or a process): move it along.
  if (taken.waiting) await startNextQueued(db, { ...input, threadId }).catch((err) => log.warn({ err, thread_id: threadId }, "could not start the queue"));
  return { kind: "queued", position: taken.position };
}

/**
 * Stops what runs in the thread (as Stop does, wherever it runs) until the interrupting
 * message, at the head of the queue, is started — here, or by the process whose response
 * ended — and returns its stream. A response that will not stop leaves it queued, first.
 */
async function interrupt(db: Db, input: Lead & { userId: string; threadId: string; message: ChatMessage }): Promise<PostedMessage> {
  const { userId, threadId } = input;
  const replyId = replyIdFor(input.message.id);
  const stopped = new Set<string>();
  const deadline = Date.now() + INTERRUPT_WAIT_MS;
  while (Date.now() < deadline) {
    const started = await startNextQueued(db, input);
    if (started?.messageId === replyId) return { kind: "started", streamId: started.streamId };
    const [mine] = await db
      .select({ id: chatStreams.id })
      .from(chatStreams)
      .where(and(eq(chatStreams.threadId, threadId), eq(chatStreams.messageId, replyId)))
      .orderBy(desc(chatStreams.createdAt))
      .limit(1);
    if (mine) return { kind: "started", streamId: mine.id };
    const active = await activeStreamOf(db, { threadId });
    if (active?.runId && !stopped.has(active.runId)) {
      stopped.add(active.runId);
      const report = await stopRunTree(db, { userId, threadId, runId: active.runId, reason: "interrupted by a new message" });
      if (!report.runAborted) await notifyChatStream(db, `stop:${active.runId}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  log.warn({ thread_id: threadId }, "the running response did not stop for an interrupting message; it waits first in the queue");
  return { kind: "queued", position: 1 };
}

/**
 * Starts the response to the head of the thread's queue when the thread is free: exactly once
 * whichever process asks (the queue's advisory lock, then the thread's lock and the un-queue
 * in one transaction). Null when nothing waits or a response runs.
 */
export async function startNextQueued(db: Db, input: Lead & { threadId: string }): Promise<StartedLeadRun | null> {
  const { threadId } = input;
  if (!(await hasQueuedMessages(db, threadId))) return null;
  const taken = await db.transaction(async (tx) => {
    await lockThreadQueue(tx, threadId);
    const head = await queueHead(tx, threadId);
    if (!head) return null;
    const [owner] = await tx.select({ userId: threads.userId }).from(threads).where(eq(threads.id, threadId));
    if (!owner) return null;
    const messageId = replyIdFor(head.id);
    const streamId = await tryLockThread(tx, { threadId, userId: owner.userId, messageId });
    if (!streamId) return null;
    const turn = await unqueueMessage(tx, { threadId, message: head });
    return { streamId, messageId, turn, userId: owner.userId };
  });
  if (!taken) return null;
  const history = (await loadMessages(db, { threadId })).filter((m) => m.id !== taken.turn.id);
  return runLocked(db, {
    ...input,
    userId: taken.userId,
    history,
    trigger: { kind: "user", message: taken.turn },
    streamId: taken.streamId,
    messageId: taken.messageId,
    // A queued message was typed, but its turn comes when nobody may be watching.
    unattended: true,
  });
}

/**
 * The web process's sweep: starts the queue of every thread that has one and no running
 * response (a process that ended a response or died before starting the next). Returns how
 * many responses it started.
 */
export async function startQueuedResponses(db: Db, lead: Lead): Promise<number> {
  const threadIds = await threadsWithQueuedMessages(db, SWEEP_LIMIT);
  return sweepThreads(threadIds, (threadId) => startNextQueued(db, { ...lead, threadId }), "could not start a queued message");
}

/**
 * A sweep's pass over the threads it found: `start` each, counting the responses started; one
 * thread's failure is logged and the sweep goes on to the next (a start answers what it started, or null).
 */
export async function sweepThreads(threadIds: readonly string[], start: (threadId: string) => Promise<unknown>, failure: string): Promise<number> {
  let started = 0;
  for (const threadId of threadIds) {
    try {
      if (await start(threadId)) started++;
    } catch (err) {
      log.warn({ err, thread_id: threadId }, failure);
    }
  }
  return started;
}

/**
 * Runs a lead response in this process, the lock taken and the user message stored,
 * independent of any HTTP request. Its UI message chunks go to PostgreSQL, so any web process
 * can stream it (readChatStream); only Stop (run registry, or a `stop:` notification from
 * another process) ends it early. The reply is stored when it ends, whatever any client did,
 * and then the thread's next queued message starts. A run nobody typed (`unattended`) that
 * may not call the model stores and streams a notice instead (answerWithNotice).
 */
export async function runLocked(
  db: Db,
  input: Lead & {
    userId: string;
    threadId: string;
    history: ChatMessage[];
    trigger: LeadTrigger;
    streamId: string;
    messageId: string;
    unattended: boolean;
    signal?: AbortSignal;
    batchFacts?: LeadResponseOptions["batchFacts"];
    /** The lead run created with the thread's lock (createLeadRun); else created here, once the run may call the model. */
    runId?: string;
  },
): Promise<StartedLeadRun> {
  const { config, model, userId, threadId, history, trigger, streamId, messageId } = input;
  const startNext = () =>
    startNextQueued(db, { config, model, threadId }).catch((err) => log.warn({ err, thread_id: threadId }, "could not start the queue"));
  const writer = new ChunkWriter(db, streamId);
  if (input.unattended) {
    let noticed: boolean;
    try {
      noticed = await noticeInstead(db, writer, input);
    } catch (err) {
      await writer.close();
      void startNext();
      throw err;
    }
    if (noticed) {
      await writer.close();
      return { streamId, runId: null, messageId, done: startNext().then(() => undefined) };
    }
  }
  // The thread's activity and title, beside the response rather than before it (one round trip
  // less on the first token's path); a failure here only leaves the sidebar order stale.
  const touched = touchThread(db, {
    userId,
    threadId,
    titleIfDefault: trigger.kind === "user" && history.length === 0 ? titleFrom(trigger.message, model) : undefined,
  }).catch((err) => log.warn({ err, thread_id: threadId }, "could not mark the thread's activity"));

  const turn: ChatMessage | undefined =
    trigger.kind === "user"
      ? trigger.message
      : trigger.kind === "system"
        ? { id: `trigger_${messageId}`, role: "user", parts: [{ type: "text", text: trigger.text, providerMetadata: trigger.providerMetadata }] }
        : undefined;
  const triggerMetadata = trigger.kind === "system" ? trigger.metadata : undefined;

  // A continuation goes on in the reply it continues (the AI SDK's continuation of the last assistant message).
  const messages = turn ? [...history, turn] : history;
  let lead: Awaited<ReturnType<typeof startLeadResponse>>;
  try {
    lead = await startLeadResponse({
      db,
      config,
      model,
      userId,
      threadId,
      messages,
      signal: input.signal,
      batchFacts: input.batchFacts,
      runId: input.runId,
    });
  } catch (err) {
    await writer.close();
    void startNext();
    throw err;
  }
  const runId = lead.runId;
  // Off the first token's path: the stream is a minute away from counting as abandoned
  // without its run, and the writer finishes it only after this settles.
  const attached = input.runId
    ? Promise.resolve()
    : attachRun(db, { streamId, runId }).catch((err) =>
        log.error({ err, stream_id: streamId, run_id: runId }, "could not attach the run to its chat stream"),
      );
  // Stop pressed on another web process reaches this one as a notification.
  const unsubscribeStop = await onChatStreamEvent(db, (payload) => {
    if (payload === `stop:${runId}`) abortLiveRun(runId);
  });

  const stream = createUIMessageStream<ChatMessage>({
    originalMessages: messages,
    onError: lead.errorText,
    async execute({ writer: ui }) {
      const start: ChatMessageMetadata = { runId, model: model.name, simulator: model.simulator };
      ui.write({ type: "start", messageId, messageMetadata: { ...start, ...triggerMetadata } });
      await lead.execute(ui);
    },
    async onFinish({ responseMessage, isAborted, finishReason }) {
      await touched; // never rejects; the reply's touch below comes after it
      try {
        const metadata = await lead.finish({ aborted: isAborted, responseText: responseText(responseMessage), finishReason });
        if (responseMessage.parts.length > 0) {
          await saveMessage(db, {
            threadId,
            message: { ...responseMessage, metadata: { ...responseMessage.metadata, ...triggerMetadata, ...metadata } },
          });
        }
        await touchThread(db, { userId, threadId });
      } catch (err) {
        log.error({ err, run_id: runId, thread_id: threadId }, "could not persist the lead response");
      }
    },
  });

  const streamed = (async () => {
    const reader = stream.getReader();
    let firstToken = true;
    try {
      for (;;) {
        const { done: ended, value } = await reader.read();
        if (ended) break;
        writer.write(value);
        // A reply that arrives in a burst (a fast provider, the simulator) would otherwise pass
        // whole through the AI SDK's stages, its storage and its finish before the readers'
        // streams get a turn to write the first token to their sockets: let them, once.
        if (firstToken && (value.type === "text-delta" || value.type === "reasoning-delta")) {
          firstToken = false;
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      }
    } catch (err) {
      log.error({ err, run_id: runId }, "lead response stream failed");
    } finally {
      unsubscribeStop();
      await attached;
      await writer.close().catch((err) => log.error({ err, stream_id: streamId }, "could not finish the chat stream"));
      await pruneFinishedStreams(db).catch((err) => log.warn({ err }, "could not prune finished chat streams"));
    }
  })();
  // The thread is free: its next queued message (if any) starts, as its own response.
  const done = streamed.then(startNext).then(() => undefined);

  return { streamId, runId, messageId, done };
}

/** Takes every queued message of the thread out of the queue, in order (they join the conversation unanswered); returns how many. */
async function unqueueAll(db: Db, threadId: string): Promise<number> {
  return db.transaction(async (tx) => {
    await lockThreadQueue(tx, threadId);
    let n = 0;
    for (let head = await queueHead(tx, threadId); head; head = await queueHead(tx, threadId)) {
      await unqueueMessage(tx, { threadId, message: head });
      n++;
    }
    return n;
  });
}

/**
 * A run nobody typed that unattended.ts refuses: stores a notice in place of the response (the
 * thread's lock held) and streams it as one, so a reader of the thread's stream (an
 * interrupting request, a reload) sees it. False when the model may run.
 */
async function noticeInstead(
  db: Db,
  writer: ChunkWriter,
  input: Lead & { userId: string; threadId: string; trigger: LeadTrigger; messageId: string },
): Promise<boolean> {
  const { config, userId, threadId, trigger, messageId } = input;
  const refusal = await refuseUnattended(db, config, { userId, threadId, wakeup: trigger.kind === "system" });
  if (!refusal) return false;
  // The messages queued behind a refused one would be refused too: one notice answers them all.
  const behind = trigger.kind === "user" ? await unqueueAll(db, threadId) : 0;
  const text =
    trigger.kind === "system"
      ? (trigger.refused?.(refusal.why) ?? `I did not go on by myself: ${refusal.why}.`)
      : behind === 0
        ? `I did not answer this message: ${refusal.why}.`
        : `I did not answer these ${behind + 1} messages: ${refusal.why}.`;
  const metadata: ChatMessageMetadata = { ...(trigger.kind === "system" ? trigger.metadata : {}), notice: refusal.notice };
  await saveMessage(db, { threadId, message: { id: messageId, role: "assistant", parts: [{ type: "text", text }], metadata } });
  writer.write({ type: "start", messageId, messageMetadata: metadata });
  writer.write({ type: "text-start", id: "notice" });
  writer.write({ type: "text-delta", id: "notice", delta: text });
  writer.write({ type: "text-end", id: "notice" });
  writer.write({ type: "finish" });
  await touchThread(db, { userId, threadId });
  log.info({ thread_id: threadId, message_id: messageId, notice: refusal.notice }, "a lead run nobody typed stored a notice instead");
  return true;
}
