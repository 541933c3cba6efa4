import type { Metadata } from "next";
import { notFound, redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ThreadView } from "@/components/chat/thread-view";
import { loadMessages } from "@/server/chat/messages";
import { getThreadForUser, type ThreadRecord } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";
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
  const messages = await loadMessages(db, { threadId: thread.id });
  const model = resolveModel();
  return (
    <ThreadView
      key={thread.id}
      thread={{ id: thread.id, title: thread.title }}
      initialMessages={messages}
      model={{ name: model.name, simulator: model.simulator }}
    />
  );
}
