import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { NewThreadButton } from "@/components/chat/new-thread-button";
import { listThreads } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";

export const dynamic = "force-dynamic";

/** Opens the most recently active thread, or invites the first one. */
export default async function Home() {
  const user = await currentUser();
  if (!user) redirect("/signin");
  const [newest] = await listThreads(getDatabase().db, { userId: user.id, limit: 1 });
  if (newest) redirect(`/threads/${newest.id}`);
  return (
    <div className="flex flex-1 items-center justify-center p-8">
      <div className="max-w-sm text-center">
        <h1 className="text-xl font-semibold tracking-tight">Start a conversation</h1>
        <p className="mt-2 text-sm text-zinc-500">
          Ask the lead agent anything. It answers directly, or delegates to sub-agents, swarms and durable batches when
          the work is large.
        </p>
        <NewThreadButton className="mx-auto mt-6 w-44" />
      </div>
    </div>
  );
}
