"use server";

import { revalidatePath } from "next/cache";
import { redirect } from "next/navigation";
import { currentUser } from "@/app/current-user";
import { createInvite, INVITE_DEFAULT_DAYS } from "@/server/auth/invites";
import { signOutEverywhere } from "@/server/auth/sessions";
import { getDatabase } from "@/server/db/client";
import { AppError } from "@/server/errors";

/** Ends every session of the caller, this one included, and goes to sign-in. */
export async function signOutEverywhereAction(): Promise<void> {
  const user = await currentUser();
  if (!user) redirect("/signin");
  await signOutEverywhere(getDatabase().db, user.id);
  redirect("/signin");
}

export type InviteResult = { ok: true; code: string; expiresAt: string } | { ok: false; error: string };

/** Admin only: a new single-use invite code, shown once. */
export async function createInviteAction(expiresInDays: number = INVITE_DEFAULT_DAYS): Promise<InviteResult> {
  const user = await currentUser();
  if (!user?.isAdmin) return { ok: false, error: "Only the admin can create invites." };
  try {
    const invite = await createInvite(getDatabase().db, { createdBy: user.id, expiresInDays });
    revalidatePath("/settings");
    return { ok: true, code: invite.code, expiresAt: invite.expiresAt.toISOString() };
  } catch (err) {
    if (err instanceof AppError) return { ok: false, error: err.message };
    throw err;
  }
}
