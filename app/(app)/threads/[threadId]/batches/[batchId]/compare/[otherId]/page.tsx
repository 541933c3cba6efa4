import type { Metadata } from "next";
import Link from "next/link";
import { notFound, redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ThreadsMenuButton } from "@/components/chat/threads-drawer";
import { ComparePage } from "@/components/compare/compare-page";
import { compareChangeSchema, compareSummarySchema } from "@/lib/api/compare";
import { compareSummary } from "@/server/batches/compare";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { parseOtherBatchId, project } from "@/server/http/batch-scope";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Compare batches · Flotilla" };

type Props = {
  params: Promise<{ threadId: string; batchId: string; otherId: string }>;
  searchParams: Promise<Record<string, string | string[] | undefined>>;
};

/** Batch a of this thread against batch b (any of the person's), item by item (DESIGN "Judging a batch"). */
export default async function CompareBatchesRoute({ params, searchParams }: Props) {
  const { threadId, batchId, otherId } = await params;
  const user = await currentUser();
  const path = `/threads/${threadId}/batches/${batchId}/compare/${otherId}`;
  if (!user) redirect(`/signin?callbackUrl=${encodeURIComponent(path)}`);
  const { db } = getDatabase();
  const found = await ownedOr404(async () => {
    const thread = await getThreadForUser(db, { userId: user.id, threadId });
    const summary = await compareSummary(db, { userId: user.id, threadId: thread.id, batchId, otherId: parseOtherBatchId(otherId) });
    return { thread, summary };
  });
  const change = compareChangeSchema.safeParse((await searchParams).change);
  return (
    <div className="flex min-h-0 flex-1 flex-col">
      <header data-page-header="" className="flex min-h-12 shrink-0 items-center gap-2 border-b border-zinc-200 bg-white px-3 py-1.5 md:min-h-14 md:gap-3 md:px-4">
        <ThreadsMenuButton className="-ml-1" />
        <div className="min-w-0 flex-1">
          <Link
            href={`/threads/${found.thread.id}`}
            className="flex max-w-full items-center gap-1 text-xs text-sky-800 underline-offset-2 hover:underline focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            <span aria-hidden>←</span>
            <span className="truncate">Back to {found.thread.title}</span>
          </Link>
          <h1 className="truncate text-sm font-semibold">
            Compare batch <span className="font-mono">{found.summary.a.id.slice(0, 8)}</span> with{" "}
            <span className="font-mono">{found.summary.b.id.slice(0, 8)}</span>
          </h1>
        </div>
      </header>
      <div className="min-h-0 flex-1 overflow-y-auto px-3 py-3 md:px-6 md:py-4">
        <ComparePage
          ids={{ threadId: found.thread.id, a: found.summary.a.id, b: found.summary.b.id }}
          initialSummary={project(compareSummarySchema, found.summary)}
          initialChange={change.success ? change.data : null}
        />
      </div>
    </div>
  );
}

/** Someone else's thread or batch, a malformed id and one that does not exist look the same: 404. */
async function ownedOr404<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    if (err instanceof AppError && err.code === "not_found") notFound();
    throw err;
  }
}
