import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ownedOr404 } from "@/app/owned-or-404";
import { BatchResultsPage } from "@/components/batches/results-page";
import { BatchPageFrame } from "@/components/batches/batch-page-frame";
import { verdictSchema } from "@/lib/api/batch-data";
import { batchProjectionSchema, featuresSchema, itemStatusSchema } from "@/lib/api/batches";
import { getBatch } from "@/server/batches/owned";
import { projectBatch } from "@/server/batches/projection";
import { getThreadForUser } from "@/server/chat/threads";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
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
    <BatchPageFrame
      thread={found.thread}
      title={
        <>
          Results of batch <span className="font-mono">{found.batch.id.slice(0, 8)}</span>
        </>
      }
    >
        <BatchResultsPage
          threadId={found.thread.id}
          initialBatch={project(batchProjectionSchema, batch)}
          initialFeatures={project(featuresSchema, features)}
          initialFilter={{ status: status.success ? status.data : null, verdict: verdict.success ? verdict.data : null }}
        />
    </BatchPageFrame>
  );
}
