import type { Metadata } from "next";
import Link from "next/link";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { formatCount } from "@/lib/format";
import { goldenSetPagePath } from "@/components/golden-sets/api";
import { LocalTime } from "@/components/golden-sets/local-time";
import { listGoldenSets } from "@/server/batches/golden-sets";
import { getDatabase } from "@/server/db/client";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Golden sets · Flotilla" };

/** The person's golden sets, the most recently changed first (DESIGN "Reviews that teach"). */
export default async function GoldenSetsPage() {
  const user = await currentUser();
  if (!user) redirect(`/signin?callbackUrl=${encodeURIComponent("/golden-sets")}`);
  const sets = await listGoldenSets(getDatabase().db, user.id);
  return (
    <div className="min-h-0 flex-1 overflow-y-auto p-4 sm:p-6">
      <div className="mx-auto max-w-6xl space-y-4">
        <header>
          <h1 className="text-xl font-semibold tracking-tight">Golden sets</h1>
          <p className="mt-1 text-sm text-zinc-500">
            The answers people decided on in review, kept to grade later runs against and to show a model as examples.
          </p>
        </header>
        {sets.length === 0 ? (
          <div data-testid="golden-sets-empty" className="rounded-lg border border-dashed border-zinc-300 bg-white p-6 text-sm text-zinc-600">
            <p className="font-medium text-zinc-900">No golden sets yet.</p>
            <p className="mt-1">
              Review a batch&apos;s answers in{" "}
              <Link href="/review" className="font-medium text-sky-800 underline underline-offset-2">
                Review
              </Link>
              , then choose &ldquo;Save reviewed as golden set…&rdquo; there or in the batch&apos;s menu.
            </p>
          </div>
        ) : (
          <ul aria-label="Golden sets" className="divide-y divide-zinc-100 overflow-hidden rounded-lg border border-zinc-200 bg-white">
            {sets.map((s) => (
              <li key={s.id}>
                <Link
                  href={goldenSetPagePath(s.id)}
                  data-testid="golden-set-link"
                  className="flex min-w-0 flex-wrap items-baseline gap-x-3 gap-y-0.5 px-4 py-3 hover:bg-zinc-50 focus-visible:outline-2 focus-visible:-outline-offset-2 focus-visible:outline-sky-600"
                >
                  <span className="min-w-0 font-medium wrap-anywhere text-sky-800">{s.name}</span>
                  <span className="text-xs text-zinc-600 tabular-nums">
                    version {s.version} · {formatCount(s.items)} items
                  </span>
                  <span className="ml-auto text-xs text-zinc-500 tabular-nums">
                    changed <LocalTime iso={s.updated_at} />
                  </span>
                </Link>
              </li>
            ))}
          </ul>
        )}
      </div>
    </div>
  );
}
