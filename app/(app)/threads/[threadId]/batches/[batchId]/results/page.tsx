import type { Metadata } from "next";
import Link from "next/link";
import { notFound, redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { BatchResultsPage } from "@/components/batches/results-page";
import { ThreadsMenuButton } from "@/components/chat/threads-drawer";
import { verdictSchema } from "@/lib/api/batch-data";
import { batchProjectionSchema, featuresSchema, itemStatusSchema } from "@/lib/api/batches";
import { getBatch } from "@/server/batches/owned";
import { projectBatch } from "@/server/batches/projection";
import { getThreadForUser } from "@/server/chat/threads";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { getFeatures } from "@/server/features";
import { project } from "@/server/http/batch-scope";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Batch results · Flotilla" };

type Props = {
  params: Promise<{ threadId: string; batchId: string }>;
  searchParams: Promise<Record<string, string | string[] | undefined>>;
};

/** A batch's Results at the screen's width (linked from the panel's Results view as "Open full width"). */
export default async function BatchResultsRoute({ params, searchParams }: Props) {
  const { threadId, batchId } = await params;
  const user = await currentUser();
  const path = `/threads/${threadId}/batches/${batchId}/results`;
  if (!user) redirect(`/signin?callbackUrl=${encodeURIComponent(path)}`);
  const { db } = getDatabase();
  const config = getConfig();
  const found = await ownedOr404(async () => ({
    thread: await getThreadForUser(db, { userId: user.id, threadId }),
    batch: await getBatch(db, { userId: user.id, threadId, batchId }),
  }));
  const [batch, features] = await Promise.all([
    projectBatch(db, { batch: found.batch, leaseSeconds: config.subagent_batches.lease_seconds }),
    getFeatures(db, config),
  ]);
  // The filters the panel had (an unknown value is "All").
  const query = await searchParams;
  const status = itemStatusSchema.safeParse(query.status);
  const verdict = verdictSchema.safeParse(query.verdict);
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
            Results of batch <span className="font-mono">{found.batch.id.slice(0, 8)}</span>
          </h1>
        </div>
      </header>
      <div className="min-h-0 flex-1 overflow-y-auto px-3 py-3 md:px-6 md:py-4">
        <BatchResultsPage
          threadId={found.thread.id}
          initialBatch={project(batchProjectionSchema, batch)}
          initialFeatures={project(featuresSchema, features)}
          initialFilter={{ status: status.success ? status.data : null, verdict: verdict.success ? verdict.data : null }}
        />
      </div>
    </div>
  );
}

/** Someone else's thread or batch and one that does not exist look the same: 404. */
async function ownedOr404<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    if (err instanceof AppError && err.code === "not_found") notFound();
    throw err;
  }
}
