import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ReviewQueue } from "@/components/review/review-queue";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Review · Flotilla" };

/** The person's review queue across their batches, one item at a time (DESIGN "Judging a batch"). */
export default async function ReviewPage() {
  const user = await currentUser();
  if (!user) redirect(`/signin?callbackUrl=${encodeURIComponent("/review")}`);
  return (
    <div className="min-h-0 flex-1 overflow-y-auto p-4 sm:p-6">
      <div className="mx-auto max-w-6xl space-y-4">
        <header>
          <h1 className="text-xl font-semibold tracking-tight">Review</h1>
          <p className="mt-1 text-sm text-zinc-500">Answers waiting for a person&apos;s eye, oldest first, across your batches.</p>
        </header>
        <ReviewQueue />
      </div>
    </div>
  );
}
