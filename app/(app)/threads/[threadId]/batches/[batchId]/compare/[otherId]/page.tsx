import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ownedOr404 } from "@/app/owned-or-404";
import { BatchPageFrame } from "@/components/batches/batch-page-frame";
import { ComparePage } from "@/components/compare/compare-page";
import { compareChangeSchema, compareSummarySchema } from "@/lib/api/compare";
import { compareSummary } from "@/server/batches/compare";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
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
    <BatchPageFrame
      thread={found.thread}
      title={
        <>
          Compare batch <span className="font-mono">{found.summary.a.id.slice(0, 8)}</span> with{" "}
            <span className="font-mono">{found.summary.b.id.slice(0, 8)}</span>
        </>
      }
    >
        <ComparePage
          ids={{ threadId: found.thread.id, a: found.summary.a.id, b: found.summary.b.id }}
          initialSummary={project(compareSummarySchema, found.summary)}
          initialChange={change.success ? change.data : null}
        />
    </BatchPageFrame>
  );
}
