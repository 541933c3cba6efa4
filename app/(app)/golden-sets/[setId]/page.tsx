import type { Metadata } from "next";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { ownedOr404 } from "@/app/owned-or-404";
import { GoldenSetView } from "@/components/golden-sets/golden-set-view";
import { goldenSetDetailSchema } from "@/lib/api/golden-sets";
import { getGoldenSet } from "@/server/batches/golden-sets";
import { getDatabase } from "@/server/db/client";
import { project } from "@/server/http/batch-scope";

export const dynamic = "force-dynamic";
export const metadata: Metadata = { title: "Golden set · Flotilla" };

type Props = { params: Promise<{ setId: string }> };

/** One golden set: its versions and a version's items (another person's set is a 404). */
export default async function GoldenSetRoute({ params }: Props) {
  const { setId } = await params;
  const user = await currentUser();
  if (!user) redirect(`/signin?callbackUrl=${encodeURIComponent(`/golden-sets/${setId}`)}`);
  const detail = await ownedOr404(() => getGoldenSet(getDatabase().db, { userId: user.id, setId }));
  return <GoldenSetView initialDetail={project(goldenSetDetailSchema, detail)} />;
}
