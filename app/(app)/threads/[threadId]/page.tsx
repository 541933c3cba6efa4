import type { Metadata } from "next";
import { notFound, redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ThreadView } from "@/components/chat/thread-view";
import { loadMessages } from "@/server/chat/messages";
import { getThreadForUser, type ThreadRecord, threadUse } from "@/server/chat/threads";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { getFeatures } from "@/server/features";
import { resolveModel } from "@/server/models";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Flotilla" };

export default async function ThreadPage({ params }: { params: Promise<{ threadId: string }> }) {
  const { threadId } = await params;
  const user = await currentUser();
  if (!user) redirect(`/signin?callbackUrl=${encodeURIComponent(`/threads/${threadId}`)}`);
  const { db } = getDatabase();
  let thread: ThreadRecord;
  try {
    thread = await getThreadForUser(db, { userId: user.id, threadId });
  } catch (err) {
    // Someone else's thread and a thread that does not exist look the same.
    if (err instanceof AppError && err.code === "not_found") notFound();
    throw err;
  }
  const [messages, use, features] = await Promise.all([
    loadMessages(db, { threadId: thread.id, withQueued: true }),
    threadUse(db, thread.id),
    getFeatures(db, getConfig()),
  ]);
  const model = resolveModel();
  // Whether the batch panel or the Files section will show: the column is laid out from the
  // first paint instead of appearing (and moving the chat) once their data arrives.
  const panelExpected = use.batches || use.files || (features.worker_runtime.alive && features.batches.enabled);
  return (
    <ThreadView
      key={thread.id}
      thread={{ id: thread.id, title: thread.title }}
      initialMessages={messages}
      model={{ name: model.name, simulator: model.simulator }}
      panelExpected={panelExpected}
    />
  );
}
