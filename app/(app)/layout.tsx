import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ThreadSidebar } from "@/components/chat/thread-sidebar";
import { ThreadsDrawerProvider } from "@/components/chat/threads-drawer";
import { listThreads, toThreadProjection } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";

export const dynamic = "force-dynamic";

export default async function AppLayout({ children }: { children: React.ReactNode }) {
  const user = await currentUser();
  if (!user) redirect("/signin");
  const threads = await listThreads(getDatabase().db, { userId: user.id });
  return (
    <ThreadsDrawerProvider>
      <div className="flex h-dvh flex-col overflow-hidden md:flex-row">
        <ThreadSidebar initialThreads={threads.map(toThreadProjection)} email={user.email} />
        <main id="main" className="flex min-h-0 min-w-0 flex-1 flex-col">{children}</main>
      </div>
    </ThreadsDrawerProvider>
  );
}
